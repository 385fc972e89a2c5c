// Either half of a `join` may be stolen by another worker: both must be
// `Send`, and so must what they return.
fn main() {
    let shared = std::rc::Rc::new(5);
    let other = shared.clone();
    loam_threadpool::join(move || *shared + 1, move || *other + 2);
}
