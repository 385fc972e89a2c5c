// A `PageRef` reads its page's metadata in place: it must not leave the
// walk that handed it out, after which the page may be released and its
// descriptor reused.
fn main() {
    let mut saved = None;
    // SAFETY: the closure neither allocates nor frees.
    unsafe { loam_heap::for_each_page(|p| saved = Some(p)) };
    drop(saved);
}
