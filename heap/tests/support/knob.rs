//! The tests' knobs, read strictly: shared by the heap's and the
//! runtime's test supports (the runtime's includes this file).

/// A test's size knob: the whole number in environment variable `name`, at
/// least `min`, or `default` when it is unset. A bad value stops the test
/// with a message: read as the default, or as 0, it ran another test than
/// the one asked for, or none at all.
pub fn knob(name: &str, default: usize, min: usize) -> usize {
    let Some(v) = std::env::var_os(name) else {
        return default;
    };
    let v = v.to_string_lossy();
    match v.trim().parse::<usize>() {
        Ok(n) if n >= min => n,
        _ => panic!("{name}={v:?}: expected a whole number of at least {min}"),
    }
}

/// A test's on/off knob, read as every `LOAM_*` flag is (`1/0`,
/// `true/false`, `on/off`, `yes/no`), or `default` when unset; a bad value
/// stops the test with a message.
pub fn flag_knob(name: &str, default: bool) -> bool {
    let Some(v) = std::env::var_os(name) else {
        return default;
    };
    let v = v.to_string_lossy();
    loam_heap::parse_flag(&v)
        .unwrap_or_else(|| panic!("{name}={v:?}: expected 1/0, true/false, on/off or yes/no"))
}
