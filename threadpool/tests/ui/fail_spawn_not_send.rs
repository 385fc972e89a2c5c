// A spawned task runs on a worker thread: what it owns must be `Send`. Two
// threads touching one `Rc`'s count without atomics is a data race.
fn main() {
    let shared = std::rc::Rc::new(5);
    loam_threadpool::spawn(move || println!("{shared}"));
}
