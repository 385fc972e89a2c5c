//! [`GcString`]: an immutable UTF-8 string in one managed allocation.

use crate::list::GcList;
use loam_runtime::{AllocError, CellValue, Gc, Mutation, Trace, Tracer};
use std::borrow::Borrow;
use std::cell::RefCell;
use std::fmt;
use std::hash::{BuildHasher, Hash, Hasher};
use std::ops::{Bound, Deref, RangeBounds};

/// Bytes before the text: the cached hash.
const HASH_BYTES: usize = 8;

/// The hash a string caches: fixed-seed foldhash of its bytes, the same in
/// every thread and run.
fn hash_bytes(bytes: &[u8]) -> u64 {
    foldhash::fast::FixedState::with_seed(0x6c6f_616d).hash_one(bytes)
}

/// An immutable UTF-8 string in the managed heap: one allocation holding
/// the length (beside the object header), a cached hash and the bytes.
///
/// `GcString` is a handle (`Copy`, one word) that derefs to `str`, so every
/// `str` method that reads (`find`, `starts_with`, `ends_with`, `parse`,
/// `chars`, `lines` …) works on it directly. The methods here are the ones
/// that make new managed strings ([`concat`](Self::concat),
/// [`substring`](Self::substring), [`split`](Self::split) into a
/// [`GcList`], [`trim`](Self::trim), case conversion) and take the call's
/// `Mutation`. Those hide `str`'s methods of the same names (`split`,
/// `trim`, `trim_start`, `trim_end`, `to_uppercase`, `to_lowercase`):
/// for `str`'s, borrowed pieces with no allocation, go through
/// [`as_str`](Self::as_str): `s.as_str().split(',')`. Equality compares the cached hashes first; `Hash` is `str`'s,
/// so with [`Borrow<str>`] a dictionary keyed by `GcString` is queried with
/// a `&str`. [`gc_format!`](crate::gc_format) formats into one.
///
/// # Examples
/// ```
/// use loam_collections::{gc_format, GcString};
///
/// let rt = loam_runtime::Runtime::builder().gc_threads(1).build();
/// let mut m = rt.attach();
/// m.mutate(|mc| {
///     let s = GcString::new(mc, "  key=value  ").trim(mc);
///     assert_eq!(s, "key=value");
///     let parts = s.split(mc, '=');
///     assert_eq!(parts.at(0), "key");
///     assert_eq!(parts.at(1).to_uppercase(mc), "VALUE");
///     assert!(s.starts_with("key") && s.find('=') == Some(3));
///     assert_eq!(gc_format!(mc, "{}-{}", s.len(), 7), "9-7");
/// });
/// ```
#[derive(Clone, Copy)]
#[repr(transparent)]
pub struct GcString<'gc> {
    /// The cached hash (native-endian), then the UTF-8 text.
    bytes: Gc<'gc, [u8]>,
}

// SAFETY: a transparent `Gc`: one pointer word, no padding.
unsafe impl CellValue for GcString<'_> {}

// SAFETY: reports the one managed pointer it holds (1, 2, 3); no `Drop` (4).
unsafe impl Trace for GcString<'_> {
    fn trace(&self, tracer: &mut Tracer) {
        self.bytes.trace(tracer)
    }
}

// SAFETY: `Unbranded` is `GcString` with its one lifetime, the brand,
// bound by the `Rootable` parameter: its `Root` at `'gc` is `Self`.
unsafe impl<'gc> loam_runtime::Rebrand<'gc> for GcString<'gc> {
    type Unbranded = dyn for<'a> loam_runtime::Rootable<'a, Root = GcString<'a>>;
}

impl<'gc> GcString<'gc> {
    /// A managed copy of `s`.
    ///
    /// # Panics
    /// At the heap limit (see [`try_new`](Self::try_new)).
    pub fn new(mc: &Mutation<'gc>, s: &str) -> Self {
        Self::try_new(mc, s).unwrap_or_else(|e| alloc_failed(e))
    }

    /// A managed copy of `s`, or the heap-limit `Err`.
    pub fn try_new(mc: &Mutation<'gc>, s: &str) -> Result<Self, AllocError<()>> {
        let hash = hash_bytes(s.as_bytes());
        let bytes = mc.try_alloc_concat(&[&hash.to_ne_bytes()[..], s.as_bytes()])?;
        Ok(GcString { bytes })
    }

    /// The string `a` then `b`, in one allocation.
    fn try_from_two(mc: &Mutation<'gc>, a: &str, b: &str) -> Result<Self, AllocError<()>> {
        with_scratch(|buf| {
            buf.push_str(a);
            buf.push_str(b);
            Self::try_new(mc, buf)
        })
    }

    /// The text.
    #[inline]
    pub fn as_str(&self) -> &'gc str {
        let bytes = &Gc::get(self.bytes)[HASH_BYTES..];
        // SAFETY: the bytes after the hash were copied from a `&str` when
        // the string was made, and never change.
        unsafe { std::str::from_utf8_unchecked(bytes) }
    }

    /// The cached hash of the text (fixed-seed foldhash; the same for equal
    /// strings, in every thread and run).
    #[inline]
    pub fn hash_code(&self) -> u64 {
        let mut h = [0; HASH_BYTES];
        h.copy_from_slice(&Gc::get(self.bytes)[..HASH_BYTES]);
        u64::from_ne_bytes(h)
    }

    /// Whether `a` and `b` are the same object (not only equal text).
    pub fn ptr_eq(a: Self, b: Self) -> bool {
        Gc::ptr_eq(a.bytes, b.bytes)
    }

    /// This string followed by `other`, as a new string.
    ///
    /// # Panics
    /// At the heap limit.
    pub fn concat(&self, mc: &Mutation<'gc>, other: &str) -> Self {
        Self::try_from_two(mc, self.as_str(), other).unwrap_or_else(|e| alloc_failed(e))
    }

    /// [`concat`](Self::concat), or the heap-limit `Err`.
    pub fn try_concat(&self, mc: &Mutation<'gc>, other: &str) -> Result<Self, AllocError<()>> {
        Self::try_from_two(mc, self.as_str(), other)
    }

    /// The bytes `range` of the text, as a new string (the whole string
    /// itself when the range covers it).
    ///
    /// # Panics
    /// If the range is out of bounds or does not fall on `char` boundaries
    /// (as `&s[range]` does), or at the heap limit.
    #[inline]
    pub fn substring(&self, mc: &Mutation<'gc>, range: impl RangeBounds<usize>) -> Self {
        self.try_substring(mc, range).unwrap_or_else(|e| alloc_failed(e))
    }

    /// [`substring`](Self::substring), or the heap-limit `Err`.
    ///
    /// # Panics
    /// As `substring`, for a range out of bounds or off a `char` boundary.
    pub fn try_substring(&self, mc: &Mutation<'gc>, range: impl RangeBounds<usize>) -> Result<Self, AllocError<()>> {
        let s = self.as_str();
        let (start, end) = (range.start_bound().cloned(), range.end_bound().cloned());
        // Out of range: the bounds and the length, as `Vec`'s messages
        // give them (`str`'s quotes the text instead, and not its length).
        let past = |i: usize| i > s.len();
        if matches!(start, Bound::Included(i) if past(i))
            || matches!(end, Bound::Excluded(i) if past(i))
            || matches!(end, Bound::Included(i) if i >= s.len())
        {
            substring_out_of_range(start, end, s.len());
        }
        // `str`'s own checks for the rest (char boundaries, a start past
        // the end): `Excluded(usize::MAX)` as a start is refused there,
        // where `i + 1` wrapped to the whole string in a release build.
        let piece = &s[(start, end)];
        if piece.len() == s.len() {
            return Ok(*self);
        }
        Self::try_new(mc, piece)
    }

    /// The pieces between occurrences of `sep`, as a list of new strings
    /// (as `str::split`: `n` separators give `n + 1` pieces).
    ///
    /// # Panics
    /// At the heap limit.
    pub fn split(&self, mc: &Mutation<'gc>, sep: char) -> GcList<'gc, GcString<'gc>> {
        GcList::from_iter(mc, self.as_str().split(sep).map(|p| GcString::new(mc, p)))
    }

    /// [`split`](Self::split) on a string separator.
    ///
    /// # Panics
    /// At the heap limit.
    pub fn split_str(&self, mc: &Mutation<'gc>, sep: &str) -> GcList<'gc, GcString<'gc>> {
        GcList::from_iter(mc, self.as_str().split(sep).map(|p| GcString::new(mc, p)))
    }

    /// [`split`](Self::split), or the heap-limit `Err` (the pieces made
    /// so far are left to the collector).
    pub fn try_split(&self, mc: &Mutation<'gc>, sep: char) -> Result<GcList<'gc, GcString<'gc>>, AllocError<()>> {
        Self::try_pieces(mc, self.as_str().split(sep))
    }

    /// [`split_str`](Self::split_str), or the heap-limit `Err` (the pieces
    /// made so far are left to the collector).
    pub fn try_split_str(&self, mc: &Mutation<'gc>, sep: &str) -> Result<GcList<'gc, GcString<'gc>>, AllocError<()>> {
        Self::try_pieces(mc, self.as_str().split(sep))
    }

    /// A list of new strings of `pieces`, or the first heap-limit `Err`:
    /// the list's own `try_from_iter` (one writer, runs of slots), ended
    /// at the first string the limit refuses.
    fn try_pieces<'s>(
        mc: &Mutation<'gc>,
        pieces: impl Iterator<Item = &'s str>,
    ) -> Result<GcList<'gc, GcString<'gc>>, AllocError<()>> {
        let mut refused = None;
        let strings = pieces.map_while(|p| GcString::try_new(mc, p).map_err(|e| refused = Some(e)).ok());
        let list = GcList::try_from_iter(mc, strings)?;
        match refused {
            Some(e) => Err(e),
            None => Ok(list),
        }
    }

    /// The text without leading and trailing whitespace (this string itself
    /// when there is none).
    ///
    /// # Panics
    /// At the heap limit.
    #[inline]
    pub fn trim(&self, mc: &Mutation<'gc>) -> Self {
        self.reuse_or_new(mc, self.as_str().trim())
    }

    /// The text without leading whitespace.
    ///
    /// # Panics
    /// At the heap limit.
    #[inline]
    pub fn trim_start(&self, mc: &Mutation<'gc>) -> Self {
        self.reuse_or_new(mc, self.as_str().trim_start())
    }

    /// The text without trailing whitespace.
    ///
    /// # Panics
    /// At the heap limit.
    #[inline]
    pub fn trim_end(&self, mc: &Mutation<'gc>) -> Self {
        self.reuse_or_new(mc, self.as_str().trim_end())
    }

    /// [`trim`](Self::trim), or the heap-limit `Err`.
    pub fn try_trim(&self, mc: &Mutation<'gc>) -> Result<Self, AllocError<()>> {
        self.try_reuse_or_new(mc, self.as_str().trim())
    }

    /// [`trim_start`](Self::trim_start), or the heap-limit `Err`.
    pub fn try_trim_start(&self, mc: &Mutation<'gc>) -> Result<Self, AllocError<()>> {
        self.try_reuse_or_new(mc, self.as_str().trim_start())
    }

    /// [`trim_end`](Self::trim_end), or the heap-limit `Err`.
    pub fn try_trim_end(&self, mc: &Mutation<'gc>) -> Result<Self, AllocError<()>> {
        self.try_reuse_or_new(mc, self.as_str().trim_end())
    }

    /// The text in upper case (Unicode's mapping, as `str::to_uppercase`).
    ///
    /// # Panics
    /// At the heap limit.
    #[inline]
    pub fn to_uppercase(&self, mc: &Mutation<'gc>) -> Self {
        self.try_to_uppercase(mc).unwrap_or_else(|e| alloc_failed(e))
    }

    /// The text in lower case (Unicode's mapping, as `str::to_lowercase`).
    ///
    /// # Panics
    /// At the heap limit.
    #[inline]
    pub fn to_lowercase(&self, mc: &Mutation<'gc>) -> Self {
        self.try_to_lowercase(mc).unwrap_or_else(|e| alloc_failed(e))
    }

    /// [`to_uppercase`](Self::to_uppercase), or the heap-limit `Err`.
    pub fn try_to_uppercase(&self, mc: &Mutation<'gc>) -> Result<Self, AllocError<()>> {
        self.map_case(
            mc,
            |b| b.is_ascii_lowercase(),
            str::make_ascii_uppercase,
            str::to_uppercase,
        )
    }

    /// [`to_lowercase`](Self::to_lowercase), or the heap-limit `Err`.
    pub fn try_to_lowercase(&self, mc: &Mutation<'gc>) -> Result<Self, AllocError<()>> {
        self.map_case(
            mc,
            |b| b.is_ascii_uppercase(),
            str::make_ascii_lowercase,
            str::to_lowercase,
        )
    }

    /// A case conversion: this string itself when no byte `changes`, an
    /// in-place ASCII map through the scratch buffer for ASCII text, the
    /// Unicode mapping otherwise.
    fn map_case(
        &self,
        mc: &Mutation<'gc>,
        changes: impl Fn(u8) -> bool,
        ascii: impl FnOnce(&mut str),
        unicode: impl FnOnce(&str) -> String,
    ) -> Result<Self, AllocError<()>> {
        let s = self.as_str();
        if !s.is_ascii() {
            return Self::try_new(mc, &unicode(s));
        }
        if !s.bytes().any(changes) {
            return Ok(*self);
        }
        with_scratch(|buf| {
            buf.push_str(s);
            ascii(buf.as_mut_str());
            Self::try_new(mc, buf)
        })
    }

    /// `part` as a string: this one when it is the whole text.
    #[inline]
    fn reuse_or_new(&self, mc: &Mutation<'gc>, part: &str) -> Self {
        self.try_reuse_or_new(mc, part).unwrap_or_else(|e| alloc_failed(e))
    }

    /// [`reuse_or_new`](Self::reuse_or_new), or the heap-limit `Err`.
    fn try_reuse_or_new(&self, mc: &Mutation<'gc>, part: &str) -> Result<Self, AllocError<()>> {
        if part.len() == self.len() {
            Ok(*self)
        } else {
            Self::try_new(mc, part)
        }
    }

    /// Formats `args` into a new string (what [`gc_format!`](crate::gc_format)
    /// calls).
    ///
    /// # Panics
    /// At the heap limit, or if a `Display` impl returns an error.
    #[inline]
    pub fn format(mc: &Mutation<'gc>, args: fmt::Arguments<'_>) -> Self {
        Self::try_format(mc, args).unwrap_or_else(|e| alloc_failed(e))
    }

    /// [`format`](Self::format), or the heap-limit `Err`.
    ///
    /// # Panics
    /// If a `Display` impl returns an error.
    pub fn try_format(mc: &Mutation<'gc>, args: fmt::Arguments<'_>) -> Result<Self, AllocError<()>> {
        if let Some(s) = args.as_str() {
            return Self::try_new(mc, s);
        }
        with_scratch(|buf| {
            fmt::write(buf, args).expect("a Display impl returned an error");
            Self::try_new(mc, buf)
        })
    }
}

/// Runs `f` with an empty scratch string of this thread (a fresh one if a
/// formatting impl inside `f` is using it already, or if the thread's own
/// is gone: a thread-local destructor that formats at the thread's exit,
/// after the scratch string's own destructor ran, panicked there, and a
/// panic in a thread-local destructor aborts the process).
pub(crate) fn with_scratch<R>(f: impl FnOnce(&mut String) -> R) -> R {
    thread_local!(static SCRATCH: RefCell<String> = const { RefCell::new(String::new()) });
    /// Gives a scratch string past 1 MiB back when `f` is done, a panic
    /// included (a `gc_format!` at the heap limit, or a `Display` impl
    /// that panics, caught by the program: the thread kept the failed
    /// text's buffer, native memory no heap limit counts).
    struct Capped<'a>(std::cell::RefMut<'a, String>);
    impl Drop for Capped<'_> {
        fn drop(&mut self) {
            if self.0.capacity() > 1 << 20 {
                *self.0 = String::new();
            }
        }
    }
    let mut f = Some(f);
    let ran = SCRATCH.try_with(|s| {
        let mut buf = Capped(s.try_borrow_mut().ok()?);
        buf.0.clear();
        Some((f.take().expect("run once"))(&mut buf.0))
    });
    match ran {
        Ok(Some(r)) => r,
        _ => (f.take().expect("not run"))(&mut String::new()),
    }
}

#[cold]
#[inline(never)]
fn alloc_failed(e: AllocError<()>) -> ! {
    panic!("loam-collections: {e}")
}

/// Formats into a new [`GcString`]: `gc_format!(mc, "{x}-{}", y)`.
///
/// ```
/// let rt = loam_runtime::Runtime::builder().gc_threads(1).build();
/// let mut m = rt.attach();
/// m.mutate(|mc| {
///     let key = loam_collections::gc_format!(mc, "k{}_{:x}", 7, 255);
///     assert_eq!(key, "k7_ff");
/// });
/// ```
#[macro_export]
macro_rules! gc_format {
    ($mc:expr, $($arg:tt)*) => {
        $crate::GcString::format($mc, ::std::format_args!($($arg)*))
    };
}

impl<'gc> Deref for GcString<'gc> {
    type Target = str;

    #[inline]
    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl AsRef<str> for GcString<'_> {
    #[inline]
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

// Inline, as `Deref`: a dictionary's look-up compares keys through it.
impl Borrow<str> for GcString<'_> {
    #[inline]
    fn borrow(&self) -> &str {
        self.as_str()
    }
}

impl PartialEq for GcString<'_> {
    #[inline]
    fn eq(&self, other: &Self) -> bool {
        GcString::ptr_eq(*self, *other)
            || (self.len() == other.len()
                && self.hash_code() == other.hash_code()
                && self.as_str() == other.as_str())
    }
}

impl Eq for GcString<'_> {}

impl PartialEq<str> for GcString<'_> {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for GcString<'_> {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl PartialEq<String> for GcString<'_> {
    fn eq(&self, other: &String) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<GcString<'_>> for str {
    fn eq(&self, other: &GcString<'_>) -> bool {
        self == other.as_str()
    }
}

impl PartialEq<GcString<'_>> for &str {
    fn eq(&self, other: &GcString<'_>) -> bool {
        *self == other.as_str()
    }
}

impl PartialOrd for GcString<'_> {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for GcString<'_> {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.as_str().cmp(other.as_str())
    }
}

impl PartialOrd<str> for GcString<'_> {
    fn partial_cmp(&self, other: &str) -> Option<std::cmp::Ordering> {
        Some(self.as_str().cmp(other))
    }
}

#[cold]
#[inline(never)]
fn substring_out_of_range(start: Bound<usize>, end: Bound<usize>, len: usize) -> ! {
    panic!("GcString::substring range ({start:?}, {end:?}) is out of range for a string of length {len}")
}

impl PartialEq<GcString<'_>> for String {
    fn eq(&self, other: &GcString<'_>) -> bool {
        self.as_str() == other.as_str()
    }
}

impl PartialOrd<&str> for GcString<'_> {
    fn partial_cmp(&self, other: &&str) -> Option<std::cmp::Ordering> {
        Some(self.as_str().cmp(*other))
    }
}

impl PartialOrd<String> for GcString<'_> {
    fn partial_cmp(&self, other: &String) -> Option<std::cmp::Ordering> {
        Some(self.as_str().cmp(other.as_str()))
    }
}

impl PartialOrd<GcString<'_>> for str {
    fn partial_cmp(&self, other: &GcString<'_>) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other.as_str()))
    }
}

impl PartialOrd<GcString<'_>> for &str {
    fn partial_cmp(&self, other: &GcString<'_>) -> Option<std::cmp::Ordering> {
        Some((*self).cmp(other.as_str()))
    }
}

impl PartialOrd<GcString<'_>> for String {
    fn partial_cmp(&self, other: &GcString<'_>) -> Option<std::cmp::Ordering> {
        Some(self.as_str().cmp(other.as_str()))
    }
}

/// `str`'s hash, so that `Borrow<str>` lookups find the string.
impl Hash for GcString<'_> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_str().hash(state)
    }
}

impl fmt::Display for GcString<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self.as_str(), f)
    }
}

impl fmt::Debug for GcString<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::with_scratch;

    /// A scratch string grown past 1 MiB by a call that panics is given
    /// back all the same: the next call finds a small one.
    #[test]
    fn a_panic_gives_a_grown_scratch_string_back() {
        let grown = std::panic::catch_unwind(|| {
            with_scratch(|buf| {
                buf.push_str(&"x".repeat(2 << 20));
                panic!("a Display impl that panics");
            })
        });
        assert!(grown.is_err());
        let capacity = with_scratch(|buf| buf.capacity());
        assert!(capacity <= 1 << 20, "the scratch string kept {capacity} bytes");
    }
}
