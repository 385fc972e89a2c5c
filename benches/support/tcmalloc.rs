//! TCMalloc (gperftools' `libtcmalloc_minimal`) as a `GlobalAlloc`, loaded
//! at run time with `dlopen`, so that nothing links against it: where the
//! library is not installed (Debian: `apt install libtcmalloc-minimal4`)
//! the benchmarks say so and leave it out, and the build needs nothing.
//!
//! Loaded `RTLD_LOCAL`, it does not replace the process's `malloc`: only
//! the blocks the benchmark asks of it come from it, through its `tc_`
//! entry points, as every other allocator here is called through its own.

use std::alloc::{GlobalAlloc, Layout};
use std::sync::OnceLock;

type Malloc = unsafe extern "C" fn(usize) -> *mut u8;
type Memalign = unsafe extern "C" fn(usize, usize) -> *mut u8;
type Free = unsafe extern "C" fn(*mut u8);
type Realloc = unsafe extern "C" fn(*mut u8, usize) -> *mut u8;
type Release = unsafe extern "C" fn();

struct Entry {
    malloc: Malloc,
    memalign: Memalign,
    free: Free,
    realloc: Realloc,
    release: Release,
}

/// The library's names on the distributions we know of.
const NAMES: [&std::ffi::CStr; 2] = [c"libtcmalloc_minimal.so.4", c"libtcmalloc_minimal.so"];

fn entry() -> Option<&'static Entry> {
    static ENTRY: OnceLock<Option<Entry>> = OnceLock::new();
    ENTRY
        .get_or_init(|| {
            let lib = NAMES.iter().find_map(|name| {
                // SAFETY: a NUL-terminated name; dlopen has no other
                // precondition.
                let h = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
                (!h.is_null()).then_some(h)
            })?;
            let sym = |name: &std::ffi::CStr| {
                // SAFETY: a live handle and a NUL-terminated name.
                let p = unsafe { libc::dlsym(lib, name.as_ptr()) };
                (!p.is_null()).then_some(p)
            };
            // SAFETY: each symbol is the gperftools function of that name,
            // whose C signature the type spells (gperftools/tcmalloc.h,
            // malloc_extension_c.h).
            unsafe {
                Some(Entry {
                    malloc: std::mem::transmute::<*mut libc::c_void, Malloc>(sym(c"tc_malloc")?),
                    memalign: std::mem::transmute::<*mut libc::c_void, Memalign>(sym(
                        c"tc_memalign",
                    )?),
                    free: std::mem::transmute::<*mut libc::c_void, Free>(sym(c"tc_free")?),
                    realloc: std::mem::transmute::<*mut libc::c_void, Realloc>(sym(c"tc_realloc")?),
                    release: std::mem::transmute::<*mut libc::c_void, Release>(sym(
                        c"MallocExtension_ReleaseFreeMemory",
                    )?),
                })
            }
        })
        .as_ref()
}

/// TCMalloc, if its library can be loaded here.
pub struct Tcmalloc;

impl Tcmalloc {
    /// Whether the library loaded; the allocator must not be used if not.
    pub fn available() -> bool {
        entry().is_some()
    }

    /// Gives free memory back to the OS (`MallocExtension::ReleaseFreeMemory`).
    pub fn release() {
        if let Some(e) = entry() {
            // SAFETY: takes nothing, callable at any time.
            unsafe { (e.release)() };
        }
    }

    fn entry() -> &'static Entry {
        entry().expect("tcmalloc used without checking Tcmalloc::available()")
    }
}

/// TCMalloc's `malloc` aligns to 16 bytes; larger alignments go through
/// `tc_memalign`.
const MALLOC_ALIGN: usize = 16;

// SAFETY: forwards to TCMalloc, which returns blocks of at least the asked
// size and alignment (null when out of memory) and frees what it returned.
unsafe impl GlobalAlloc for Tcmalloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let e = Self::entry();
        // SAFETY: TCMalloc's entry points take any size and a power-of-two
        // alignment.
        unsafe {
            if layout.align() <= MALLOC_ALIGN {
                (e.malloc)(layout.size())
            } else {
                (e.memalign)(layout.align(), layout.size())
            }
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, _layout: Layout) {
        // SAFETY: `ptr` came from this allocator (the caller).
        unsafe { (Self::entry().free)(ptr) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if layout.align() <= MALLOC_ALIGN {
            // SAFETY: `ptr` came from this allocator with `layout`.
            return unsafe { (Self::entry().realloc)(ptr, new_size) };
        }
        // SAFETY: the default: a new block, a copy, the old one freed.
        unsafe {
            let new = self.alloc(Layout::from_size_align_unchecked(new_size, layout.align()));
            if !new.is_null() {
                std::ptr::copy_nonoverlapping(ptr, new, layout.size().min(new_size));
                self.dealloc(ptr, layout);
            }
            new
        }
    }
}
