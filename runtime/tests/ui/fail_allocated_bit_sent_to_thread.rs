// An object's allocated bit is set by the thread that allocated it (a
// plain load and store on its page's bitmap, which only that thread
// writes): the handle cannot go to another thread.
fn main() {
    let (_, bit) = loam_heap::alloc_object(48, 8, 0, 0);
    std::thread::spawn(move || bit.unwrap().set());
}
