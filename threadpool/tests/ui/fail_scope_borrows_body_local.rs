// A scoped task may borrow what outlives the scope, not what the scope's
// body owns: the body's locals die before the scope waits for its tasks.
fn main() {
    loam_threadpool::scope(|s| {
        let local = vec![1, 2, 3];
        s.spawn(|_| println!("{local:?}"));
    });
}
