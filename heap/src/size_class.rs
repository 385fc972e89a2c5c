//! Size classes: which block size serves a request, and how many slices a page
//! of each class spans. Pure arithmetic, computed at compile time.
//!
//! Classes run in 8-byte steps to 64 and 16-byte steps to 128 (where the seed
//! profile lives: 59% of allocations under 16 bytes, 23% under 32, 18% under
//! 64), then four per doubling up to [`SMALL_MAX`]. Larger requests get a span
//! of whole slices of their own. Worst-case internal fragmentation of a class
//! is `(size - (previous size + 1)) / size`, at most 20% past 128 bytes;
//! [`worst_case_waste`] computes it with the page's tail waste included.

use crate::segment::SLICE_SIZE;

/// Number of small size classes.
pub const NUM_CLASSES: usize = 52;

/// Largest request served from a size class; larger ones get their own span.
pub const SMALL_MAX: usize = 128 * 1024;

/// The smallest block, and the alignment every block has.
pub const MIN_BLOCK: usize = 8;

const fn make_sizes() -> [u32; NUM_CLASSES] {
    let mut sizes = [0u32; NUM_CLASSES];
    let mut i = 0;
    while i < 8 {
        sizes[i] = (8 * (i + 1)) as u32;
        i += 1;
    }
    while i < 12 {
        sizes[i] = (64 + 16 * (i - 7)) as u32;
        i += 1;
    }
    // Four classes per doubling from 128: 160, 192, 224, 256, 320, ...
    let mut base = 128usize;
    while i < NUM_CLASSES {
        let step = base / 4;
        let mut j = 1;
        while j <= 4 && i < NUM_CLASSES {
            sizes[i] = (base + step * j) as u32;
            i += 1;
            j += 1;
        }
        base *= 2;
    }
    sizes
}

/// Block size of each class, ascending.
pub static CLASS_SIZE: [u32; NUM_CLASSES] = make_sizes();

/// Shift for [`RECIP`].
pub(crate) const RECIP_SHIFT: u32 = 40;

/// `RECIP[c] = ceil(2^40 / CLASS_SIZE[c])`, so that a block's index in a
/// page of class `c` is `(offset * RECIP[c]) >> 40`: a multiply instead of a
/// division on the collector's hot path. Exact for every offset in a page:
/// with `e = RECIP[c] * size - 2^40 < size`, the rounding error is
/// `offset * e / 2^40 < 2^20 * 2^17 / 2^40`, under one block.
pub(crate) static RECIP: [u64; NUM_CLASSES] = {
    let mut r = [0u64; NUM_CLASSES];
    let mut c = 0;
    while c < NUM_CLASSES {
        r[c] = const_recip(c);
        c += 1;
    }
    r
};

/// The smallest class whose blocks hold `size` bytes at alignment `align`
/// (0 is served as 1), for compile-time use: what [`class_of`] and
/// [`class_for_aligned`] find at run time. `None` past [`SMALL_MAX`].
pub(crate) const fn const_class(size: usize, align: usize) -> Option<usize> {
    if size > SMALL_MAX || align == 0 || align > SLICE_SIZE {
        return None;
    }
    let sizes = make_sizes();
    let size = if size == 0 { 1 } else { size };
    let mut c = 0;
    while c < NUM_CLASSES {
        let s = sizes[c] as usize;
        if s >= size && s % align == 0 {
            return Some(c);
        }
        c += 1;
    }
    None
}

/// Block size of class `c`, for compile-time use.
pub(crate) const fn const_class_size(c: usize) -> usize {
    make_sizes()[c] as usize
}

/// `RECIP[c]`, for compile-time use.
pub(crate) const fn const_recip(c: usize) -> u64 {
    (1u64 << RECIP_SHIFT).div_ceil(make_sizes()[c] as u64)
}

const SMALL_TABLE_MAX: usize = 1024;

const fn make_small_table() -> [u8; SMALL_TABLE_MAX / 8 + 1] {
    let sizes = make_sizes();
    let mut t = [0u8; SMALL_TABLE_MAX / 8 + 1];
    let mut i = 0;
    while i < t.len() {
        let size = if i == 0 { 1 } else { i * 8 };
        let mut c = 0;
        while (sizes[c] as usize) < size {
            c += 1;
        }
        t[i] = c as u8;
        i += 1;
    }
    t
}

/// Class for each size up to 1 KiB, indexed by `(size + 7) / 8`.
static SMALL_TABLE: [u8; SMALL_TABLE_MAX / 8 + 1] = make_small_table();

/// The class serving `size` bytes (`size <= SMALL_MAX`; 0 is served as 1).
#[inline(always)]
pub fn class_of(size: usize) -> usize {
    debug_assert!(size <= SMALL_MAX);
    if size <= SMALL_TABLE_MAX {
        SMALL_TABLE[(size + 7) >> 3] as usize
    } else {
        class_of_large(size)
    }
}

#[inline]
fn class_of_large(size: usize) -> usize {
    // size in (2^k, 2^(k+1)] with k >= 7: four steps of 2^(k-2).
    let k = (usize::BITS - 1 - (size - 1).leading_zeros()) as usize;
    let j = ((size - 1) >> (k - 2)) - 4;
    12 + (k - 7) * 4 + j
}

/// The class serving `size` bytes at alignment `align` (a power of two), or
/// `None` when no class can (the request then needs a span). Blocks of a class
/// sit at multiples of their size from a slice-aligned start, so a class whose
/// size is a multiple of `align` gives aligned blocks.
pub fn class_for_aligned(size: usize, align: usize) -> Option<usize> {
    if align > SLICE_SIZE {
        return None;
    }
    let size = size.max(align).checked_next_multiple_of(align)?;
    if size > SMALL_MAX {
        return None;
    }
    let mut c = class_of(size);
    while c < NUM_CLASSES && CLASS_SIZE[c] as usize % align != 0 {
        c += 1;
    }
    (c < NUM_CLASSES).then_some(c)
}

/// How many slices a page of `class` spans: one up to 8 KiB blocks, then
/// enough for at least eight blocks, at most 16 slices (1 MiB).
pub const fn slices_for_class(class: usize) -> usize {
    let size = CLASS_SIZE[class] as usize;
    if size <= 8 * 1024 {
        1
    } else {
        let s = (8 * size).div_ceil(SLICE_SIZE);
        if s > 16 {
            16
        } else {
            s
        }
    }
}

/// Bytes in a page of `class`.
///
/// # Panics
/// If `class` is not a size class (`class >= NUM_CLASSES`).
///
/// # Examples
/// ```
/// assert_eq!(loam_heap::class_page_size(0), 64 * 1024);
/// ```
pub fn class_page_size(class: usize) -> usize {
    check_class(class);
    slices_for_class(class) * SLICE_SIZE
}

/// Panics, naming the range, unless `class` is a size class.
fn check_class(class: usize) {
    assert!(
        class < NUM_CLASSES,
        "loam-heap: size class {class} does not exist (there are {NUM_CLASSES}: 0 to {})",
        NUM_CLASSES - 1
    );
}

/// Worst-case fraction of a page of `class` that no request can use: the
/// largest request rounded up into this class, plus the page's tail that no
/// whole block fits.
///
/// # Panics
/// If `class` is not a size class (`class >= NUM_CLASSES`).
pub fn worst_case_waste(class: usize) -> f64 {
    check_class(class);
    let size = CLASS_SIZE[class] as usize;
    let smallest_request = if class == 0 {
        1
    } else {
        CLASS_SIZE[class - 1] as usize + 1
    };
    let page = class_page_size(class);
    let blocks = page / size;
    let used_worst = blocks * smallest_request;
    1.0 - used_worst as f64 / page as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_time_classes_are_the_compile_time_ones() {
        use crate::ObjectClass;
        for size in (0..=4096).chain((4097..=SMALL_MAX).step_by(7)).chain([SMALL_MAX]) {
            assert_eq!(ObjectClass::small(size), ObjectClass::of(size, MIN_BLOCK), "size {size}");
        }
        assert_eq!(ObjectClass::small(SMALL_MAX + 1), None);
    }

    #[test]
    #[should_panic(expected = "size class 52 does not exist (there are 52: 0 to 51)")]
    fn a_class_past_the_last_is_named_in_the_panic() {
        class_page_size(NUM_CLASSES);
    }

    #[test]
    fn reciprocals_divide_exactly_within_a_page() {
        for c in 0..NUM_CLASSES {
            let size = CLASS_SIZE[c] as u64;
            let page = class_page_size(c) as u64;
            for k in 0..page / size {
                for off in [k * size, k * size + size / 2, k * size + size - 1] {
                    assert_eq!((off * RECIP[c]) >> RECIP_SHIFT, k, "class {c} offset {off}");
                }
            }
        }
    }

    #[test]
    fn classes_ascend_and_cover_small_max() {
        for w in CLASS_SIZE.windows(2) {
            assert!(w[0] < w[1], "{w:?}");
        }
        assert_eq!(CLASS_SIZE[NUM_CLASSES - 1] as usize, SMALL_MAX);
        assert_eq!(
            &CLASS_SIZE[..12],
            &[8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128]
        );
        assert_eq!(&CLASS_SIZE[12..17], &[160, 192, 224, 256, 320]);
    }

    #[test]
    fn const_class_agrees_with_the_run_time_lookups() {
        for size in 0..=SMALL_MAX {
            assert_eq!(const_class(size, 8), Some(class_of(size)), "size {size}");
            for align in [16, 64, 4096] {
                assert_eq!(const_class(size, align), class_for_aligned(size, align), "size {size} align {align}");
            }
        }
        for (c, &size) in CLASS_SIZE.iter().enumerate() {
            assert_eq!(const_class_size(c), size as usize);
        }
        assert_eq!(const_class(SMALL_MAX + 1, 8), None);
    }

    #[test]
    fn class_of_is_the_smallest_fitting_class() {
        for size in 0..=SMALL_MAX {
            let c = class_of(size);
            assert!(
                CLASS_SIZE[c] as usize >= size.max(1),
                "size {size} class {c}"
            );
            if c > 0 {
                assert!((CLASS_SIZE[c - 1] as usize) < size, "size {size} class {c}");
            }
        }
    }

    #[test]
    fn aligned_classes_give_aligned_blocks() {
        for align in [8usize, 16, 32, 64, 128, 4096, 65536] {
            for size in [1usize, 7, 24, 100, 1000, 5000, 70000] {
                if let Some(c) = class_for_aligned(size, align) {
                    let b = CLASS_SIZE[c] as usize;
                    assert!(
                        b >= size && b % align == 0,
                        "size {size} align {align} -> {b}"
                    );
                }
            }
        }
        assert_eq!(class_for_aligned(24, 16).map(|c| CLASS_SIZE[c]), Some(32));
        assert!(class_for_aligned(8, 2 * SLICE_SIZE).is_none());
    }

    #[test]
    fn waste_is_bounded() {
        for (c, &size) in CLASS_SIZE.iter().enumerate() {
            let w = worst_case_waste(c);
            // The first classes are 8 bytes wide, so a 1-byte request in the
            // 8-byte class is the worst case of all (7/8); past 128 bytes a
            // class wastes at most a fifth plus the page tail.
            let bound = if size <= 128 { 0.875 } else { 0.25 };
            assert!(w <= bound, "class {c} size {size} waste {w}");
        }
    }
}
