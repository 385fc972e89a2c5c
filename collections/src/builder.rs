//! [`GcStringBuilder`]: appends into a managed buffer, then one copy into a
//! [`GcString`].

use crate::lock::WriterLock;
use crate::string::GcString;
use loam_runtime::{AllocError, CellValue, Gc, GcCell, Mutation, Trace, Tracer};
use std::fmt;
use std::sync::atomic::AtomicU8;

/// The managed object behind a [`GcStringBuilder`].
///
/// # Invariants
/// `len <= buf.len()`, and `buf[..len]` is UTF-8 (whole `&str`s copied in);
/// both change, and the bytes are read, only under the writer lock.
#[derive(Trace)]
pub(crate) struct BuilderObj<'gc> {
    /// Bytes of text in `buf`: always a whole number of UTF-8 characters.
    len: GcCell<'gc, usize>,
    /// The buffer. Its bytes are atomics so that the object is `Sync` (and
    /// so managed), but every access to them is made under `writer`, so
    /// they are copied as plain memory.
    buf: GcCell<'gc, Gc<'gc, [AtomicU8]>>,
    #[trace(skip)]
    writer: WriterLock,
}

/// A string being built in the managed heap: appends are amortised O(1)
/// into a managed buffer that doubles when full (the old one left to the
/// collector), and [`finish`](Self::finish) copies the text into a
/// [`GcString`] once.
///
/// A handle (`Copy`, one word) like the other collections: it can be
/// rooted, stored in objects, and shared between threads (appends from two
/// threads are serialised; each lands whole).
///
/// # Examples
/// ```
/// use loam_collections::GcStringBuilder;
///
/// let rt = loam_runtime::Runtime::builder().gc_threads(1).build();
/// let mut m = rt.attach();
/// m.mutate(|mc| {
///     let b = GcStringBuilder::new(mc);
///     for i in 0..3 {
///         b.push_fmt(mc, format_args!("item{i}={};", i * 10));
///     }
///     b.push(mc, '✓');
///     assert_eq!(b.finish(mc), "item0=0;item1=10;item2=20;✓");
///     assert!(b.is_empty(), "finish leaves the builder empty, its buffer kept");
/// });
/// ```
#[derive(Clone, Copy)]
#[repr(transparent)]
pub struct GcStringBuilder<'gc> {
    obj: Gc<'gc, BuilderObj<'gc>>,
}

// SAFETY: one `Gc`, a single pointer word with no padding.
unsafe impl CellValue for GcStringBuilder<'_> {}

// SAFETY: `Unbranded` is `GcStringBuilder` with its one lifetime, the
// brand, bound by the `Rootable` parameter: its `Root` at `'gc` is `Self`.
unsafe impl<'gc> loam_runtime::Rebrand<'gc> for GcStringBuilder<'gc> {
    type Unbranded = dyn for<'a> loam_runtime::Rootable<'a, Root = GcStringBuilder<'a>>;
}

// SAFETY: reports the one managed pointer it holds (1, 2, 3); no `Drop` (4).
unsafe impl Trace for GcStringBuilder<'_> {
    fn trace(&self, tracer: &mut Tracer) {
        self.obj.trace(tracer)
    }
}

impl<'gc> GcStringBuilder<'gc> {
    /// An empty builder with a small buffer.
    pub fn new(mc: &Mutation<'gc>) -> Self {
        Self::with_capacity(mc, 64)
    }

    /// An empty builder whose buffer holds `capacity` bytes.
    ///
    /// # Panics
    /// At the heap limit.
    pub fn with_capacity(mc: &Mutation<'gc>, capacity: usize) -> Self {
        let buf = mc.alloc_from_iter((0..capacity).map(|_| AtomicU8::new(0)));
        GcStringBuilder {
            obj: mc.alloc(BuilderObj {
                len: GcCell::new(0),
                buf: GcCell::new(buf),
                writer: WriterLock::default(),
            }),
        }
    }

    /// Bytes of text so far.
    pub fn len(&self) -> usize {
        self.obj.len.get()
    }

    /// Whether no text was appended since the builder was made or finished.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes the buffer holds before it grows again.
    pub fn capacity(&self) -> usize {
        self.obj.buf.get().len()
    }

    /// Appends `s`.
    ///
    /// # Panics
    /// At the heap limit (the builder unchanged; see [`try_push_str`](Self::try_push_str)).
    pub fn push_str(&self, mc: &Mutation<'gc>, s: &str) {
        if let Err(e) = self.try_push_str(mc, s) {
            panic!("loam-collections: GcStringBuilder::push_str: {e}");
        }
    }

    /// Appends `s`, or gives the heap-limit `Err` with the builder unchanged.
    pub fn try_push_str(&self, mc: &Mutation<'gc>, s: &str) -> Result<(), AllocError<()>> {
        let _w = self.obj.writer.lock("GcStringBuilder");
        self.append(mc, s)
    }

    /// Appends `s`; the caller holds the writer lock.
    fn append(&self, mc: &Mutation<'gc>, s: &str) -> Result<(), AllocError<()>> {
        let len = self.obj.len.get();
        let mut buf = self.obj.buf.get();
        let need = len + s.len();
        if need > buf.len() {
            let cap = need.max(buf.len() * 2).max(16);
            let grown = mc.try_alloc_from_iter((0..cap).map(|_| AtomicU8::new(0)))?;
            // Both buffers are only accessed under the writer lock, which
            // the caller holds (and no other thread can reach the new one
            // yet), so their bytes are plain memory here; `len <=
            // buf.len()`, and the new buffer is larger.
            // SAFETY: as just said.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    buf[0..].as_ptr().cast::<u8>(),
                    grown[0..].as_ptr() as *mut u8,
                    len,
                )
            };
            self.obj.buf.set(mc, grown);
            buf = grown;
        }
        // SAFETY: as above, under the writer lock; `need <= buf.len()`.
        unsafe {
            std::ptr::copy_nonoverlapping(
                s.as_ptr(),
                (buf[0..].as_ptr() as *mut u8).add(len),
                s.len(),
            )
        };
        self.obj.len.set(mc, need);
        Ok(())
    }

    /// Appends `c`.
    ///
    /// # Panics
    /// At the heap limit (the builder unchanged; see [`try_push`](Self::try_push)).
    pub fn push(&self, mc: &Mutation<'gc>, c: char) {
        self.push_str(mc, c.encode_utf8(&mut [0; 4]))
    }

    /// Appends `c`, or gives the heap-limit `Err` with the builder unchanged.
    pub fn try_push(&self, mc: &Mutation<'gc>, c: char) -> Result<(), AllocError<()>> {
        self.try_push_str(mc, c.encode_utf8(&mut [0; 4]))
    }

    /// Appends `args` formatted (`format_args!`): the text is formatted
    /// first, into a scratch string of this thread, then appended whole
    /// under one take of the writer lock, so a call costs one lock and one
    /// store of the length however many pieces it formats. A `Display`
    /// impl of `args` may read this builder or append to it: its text
    /// lands before this call's.
    ///
    /// # Panics
    /// At the heap limit (the builder unchanged), if a `Display` impl of
    /// `args` returns an error, as `format!` does (the text formatted
    /// before it is appended, as `write!` into a `String` leaves it), or
    /// if one panics (nothing of this call is appended).
    pub fn push_fmt(&self, mc: &Mutation<'gc>, args: fmt::Arguments<'_>) {
        let append = |s: &str| {
            if let Err(e) = self.try_push_str(mc, s) {
                panic!("loam-collections: GcStringBuilder::push_fmt: {e}");
            }
        };
        if let Some(s) = args.as_str() {
            return append(s);
        }
        crate::string::with_scratch(|buf| {
            let formatted = fmt::write(buf, args);
            append(buf);
            formatted.expect("loam-collections: GcStringBuilder::push_fmt: a Display impl returned an error");
        });
    }

    /// The text so far as a new [`GcString`]; the builder keeps it.
    ///
    /// # Panics
    /// At the heap limit.
    pub fn to_gc_string(&self, mc: &Mutation<'gc>) -> GcString<'gc> {
        let _w = self.obj.writer.lock("GcStringBuilder");
        self.text(mc)
            .unwrap_or_else(|e| panic!("loam-collections: GcStringBuilder::to_gc_string: {e}"))
    }

    /// The text as a new [`GcString`]; the builder is emptied (its buffer
    /// kept) for the next string.
    ///
    /// # Panics
    /// At the heap limit (the builder unchanged; see [`try_finish`](Self::try_finish)).
    pub fn finish(&self, mc: &Mutation<'gc>) -> GcString<'gc> {
        self.try_finish(mc)
            .unwrap_or_else(|e| panic!("loam-collections: GcStringBuilder::finish: {e}"))
    }

    /// [`finish`](Self::finish), or the heap-limit `Err` with the builder
    /// unchanged (its text kept, for a retry after the call).
    ///
    /// # Examples
    /// ```
    /// use loam_collections::GcStringBuilder;
    /// let rt = loam_runtime::Runtime::builder().heap_limit(4 << 20).gc_threads(1).build();
    /// let mut m = rt.attach();
    /// m.mutate(|mc| {
    ///     let b = GcStringBuilder::new(mc);
    ///     b.push_str(mc, &"ab".repeat(1_100_000));
    ///     assert!(b.try_finish(mc).is_err(), "a second copy of 2.2 MB does not fit");
    ///     assert_eq!(b.len(), 2_200_000, "the text is kept");
    /// });
    /// ```
    pub fn try_finish(&self, mc: &Mutation<'gc>) -> Result<GcString<'gc>, AllocError<()>> {
        let _w = self.obj.writer.lock("GcStringBuilder");
        let s = self.text(mc)?;
        self.obj.len.set(mc, 0);
        Ok(s)
    }

    /// The text as a new string; the caller holds the writer lock.
    fn text(&self, mc: &Mutation<'gc>) -> Result<GcString<'gc>, AllocError<()>> {
        let len = self.obj.len.get();
        let buf = self.obj.buf.get();
        // SAFETY: under the writer lock the buffer is plain memory (above);
        // its first `len` bytes were copied from `&str`s, whole, so they are
        // UTF-8.
        let text = unsafe {
            std::str::from_utf8_unchecked(std::slice::from_raw_parts(
                buf[0..].as_ptr().cast::<u8>(),
                len,
            ))
        };
        GcString::try_new(mc, text)
    }

    /// Empties the builder, keeping its buffer.
    pub fn clear(&self, mc: &Mutation<'gc>) {
        let _w = self.obj.writer.lock("GcStringBuilder");
        self.obj.len.set(mc, 0);
    }
}

/// The length and capacity, not the text (which `to_gc_string` gives).
impl fmt::Debug for GcStringBuilder<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GcStringBuilder")
            .field("len", &self.len())
            .field("capacity", &self.capacity())
            .finish()
    }
}
