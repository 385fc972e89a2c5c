// A ban on pool waits counts on its thread: lifted on another, it would
// lift that thread's ban instead.
fn main() {
    let ban = loam_threadpool::forbid_waits("a test");
    std::thread::spawn(move || drop(ban));
}
