//! Which 4 MiB-aligned addresses are live segments of this allocator: one
//! bit per possible segment of the lower 128 TiB (the user address space
//! of x86-64 and AArch64 with 4-level paging), 4 MiB of zeroed static
//! memory that the kernel backs only where a bit was ever set.
//!
//! `free` asks it before touching a segment header, so that a pointer this
//! allocator never returned (a `malloc` block, a static, a stack address)
//! stops the process with a message instead of a fault inside the heap, or
//! worse, a write into someone else's memory (mimalloc's segment map is
//! the model).
//!
//! # Invariants
//! Bit `s` is set exactly while segment `s << SEGMENT_SHIFT` is registered
//! (`Segment::register` sets it, `Segment::destroy` clears it, both under
//! the registry lock). Readers load without a lock: a free of a block of a
//! live segment happens after the segment was registered (the block came
//! from it), so it sees the bit set; a pointer into a segment being
//! destroyed is a block freed after its segment died, a bug either way.
//! Segments above the mapped range (5-level paging hands such addresses
//! out only on request) are not tracked: `contains` answers yes for them.

use crate::segment::SEGMENT_SHIFT;
use crate::sync::{AtomicU64, Ordering};

/// Address bits covered: 2^47 bytes.
const ADDRESS_BITS: u32 = 47;
const WORDS: usize = 1 << (ADDRESS_BITS - SEGMENT_SHIFT as u32 - 6);

#[allow(clippy::declare_interior_mutable_const)] // only to build the array
const ZERO: AtomicU64 = AtomicU64::new(0);
static MAP: [AtomicU64; WORDS] = [ZERO; WORDS];

#[inline(always)]
fn slot(seg: usize) -> Option<(usize, u64)> {
    let s = seg >> SEGMENT_SHIFT;
    let word = s >> 6;
    (word < WORDS).then(|| (word, 1u64 << (s & 63)))
}

/// Records that segment `seg` is live.
pub(crate) fn insert(seg: usize) {
    if let Some((w, bit)) = slot(seg) {
        MAP[w].fetch_or(bit, Ordering::Relaxed);
    }
}

/// Records that segment `seg` is gone.
pub(crate) fn remove(seg: usize) {
    if let Some((w, bit)) = slot(seg) {
        MAP[w].fetch_and(!bit, Ordering::Relaxed);
    }
}

/// Whether `seg` (a segment base) may be a live segment of ours.
#[inline(always)]
pub(crate) fn contains(seg: usize) -> bool {
    match slot(seg) {
        Some((w, bit)) => MAP[w].load(Ordering::Relaxed) & bit != 0,
        None => true,
    }
}


/// Whether `seg` is a live segment of ours, answering no above the
/// tracked range (where [`contains`] answers yes): for callers that fall
/// back to something safe when the heap cannot vouch for an address.
#[inline(always)]
pub(crate) fn contains_tracked(seg: usize) -> bool {
    match slot(seg) {
        Some((w, bit)) => MAP[w].load(Ordering::Relaxed) & bit != 0,
        None => false,
    }
}
