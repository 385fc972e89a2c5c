//! Compile-time guarantees of the collections: each misuse that would be
//! unsound is a `fail_*` case with the expected error (a collection or its
//! writer kept past the `mutate` call that branded it, changed through
//! another runtime's `Mutation`, or given an element branded by another
//! call); what must keep compiling is a `pass_*` case (a collection rooted
//! across calls and stored in another).

#[test]
fn ui() {
    let cases = trybuild::TestCases::new();
    cases.pass("tests/ui/pass_*.rs");
    cases.compile_fail("tests/ui/fail_*.rs");
}
