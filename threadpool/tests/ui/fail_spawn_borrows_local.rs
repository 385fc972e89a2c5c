// A spawned task may run after its caller has returned, so it cannot
// borrow the caller's locals: the task would read freed stack memory.
fn main() {
    let data = vec![1, 2, 3];
    loam_threadpool::spawn(|| println!("{data:?}"));
}
