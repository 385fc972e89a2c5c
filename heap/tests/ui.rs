//! Compile-time guarantees of the heap's inspection API: a `PageRef`
//! cannot leave the walk that handed it out (`fail_page_ref_escapes`; the
//! same misuse is a `compile_fail` example in `inspect.rs`, which rustdoc
//! accepts on any error: this pins the error).

#[test]
fn ui() {
    trybuild::TestCases::new().compile_fail("tests/ui/fail_*.rs");
}
