//! Compile-time guarantees of the pool: each misuse that would be unsound
//! is a `fail_*` case with the expected error (a spawned task that borrows
//! its caller's locals or owns what is not `Send`, a scoped task that
//! borrows what the scope's body owns, a `join` half that is not `Send`).
//! The docs show some of them as `compile_fail` examples, which rustdoc
//! accepts on any error; these pin the error.

#[test]
fn ui() {
    trybuild::TestCases::new().compile_fail("tests/ui/fail_*.rs");
}
