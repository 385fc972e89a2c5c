//! Compile-time guarantees: each misuse of `#[derive(Trace)]` and of the
//! rooting API that would be unsound is a `fail_*` case with the expected
//! error (a `Gc` kept across a safepoint, sent to a thread, kept past its
//! call in a thread local, a static, a `Box<dyn Any>` or a panic payload, or written
//! without a barrier cell; a plain `Drop` on a traced type, or one opted
//! in without the `unsafe impl` that promises it; brands mixed
//! between calls; a barrier cell written through another runtime's or
//! another call's `Mutation`; a cell value that tells the barrier its
//! pointer its own way; a field that must not leave its thread, which the
//! finalizer thread would drop; a `Mutator`, an allocated bit's handle or
//! a ban on pool waits sent to or shared with another thread); each opt-in
//! that must keep compiling is a `pass_*` case.

#[test]
fn ui() {
    let cases = trybuild::TestCases::new();
    cases.pass("tests/ui/pass_*.rs");
    cases.compile_fail("tests/ui/fail_*.rs");
}
