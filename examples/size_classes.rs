//! Prints loam-heap's size classes: block size, page span, blocks per page and
//! the worst-case internal fragmentation of each (the smallest request that
//! lands in the class, plus the page tail no block fits).
//!
//! `cargo run --release --example size_classes`

use loam::heap::{class_page_size, worst_case_waste, CLASS_SIZE};

fn main() {
    println!(
        "{:>5} {:>8} {:>10} {:>11} {:>10}",
        "class", "size", "page KiB", "blocks/page", "worst waste"
    );
    for (c, &size) in CLASS_SIZE.iter().enumerate() {
        let size = size as usize;
        let page = class_page_size(c);
        println!(
            "{:>5} {:>8} {:>10} {:>11} {:>10.1}%",
            c,
            size,
            page / 1024,
            page / size,
            100.0 * worst_case_waste(c)
        );
    }
}
