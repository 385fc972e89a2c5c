//! Compile-time guarantees of `#[derive(Trace)]`: each misuse it forbids is a
//! `fail_*` case with the expected error; each opt-in that must keep
//! compiling is a `pass_*` case.

#[test]
fn ui() {
    let cases = trybuild::TestCases::new();
    cases.pass("tests/ui/pass_*.rs");
    cases.compile_fail("tests/ui/fail_*.rs");
}
