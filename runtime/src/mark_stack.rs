//! A marker's own mark stack ([`MarkStack`]) and how a GC thread shares
//! it with thieves ([`share_half`]). Compiled under loom too, where the
//! model of the mark's termination (`assist_model.rs`) shares through
//! the same function.

// Under loom only `share_half` is used.
#![cfg_attr(loom, allow(dead_code))]

use crossbeam_deque::Worker;

/// A marker's own mark stack, beside its deque: what its scans find goes
/// here, and a GC thread shares part of it on its deque, where other
/// threads can steal it.
///
/// Why: a pop from a LIFO `crossbeam_deque::Worker` runs a sequentially
/// consistent fence (it must not race a thief for the last item), about a
/// quarter of a GC thread's marking time on binary-trees' trees; a pop
/// from a `Vec` runs none. Go's `gcWork` buffers and the JVM's task queues
/// keep a thread's gray objects private the same way.
///
/// Sharing ([`share_half`]): whenever a GC thread's deque is empty, its
/// next pop first moves the bottom half of the stack there, if the stack
/// holds two or more entries. The bottom entries are the oldest: in a
/// tree, the roots of the largest subtrees left, so a thief's steal takes
/// much work at once, and the thread itself goes on with the top. An idle
/// thread (which watches the deques, `mark::idle`) finds work there at the
/// owner's next pop. An assist's deque has no stealer, so it shares
/// nothing ([`pop_own`](Self::pop_own)). Either leaves the mark only with
/// its stack and deque empty, or hands both over ([`drain_into`](Self::drain_into)),
/// so the termination argument (`mark.rs`, and its `Share`) is unchanged:
/// work is held, and pushed, by active threads only.
#[derive(Default)]
pub(crate) struct MarkStack(Vec<usize>);

impl MarkStack {
    #[inline]
    pub(crate) fn push(&mut self, entry: usize) {
        self.0.push(entry);
    }

    /// The top entry, after sharing the bottom half with `deque` if it is
    /// empty.
    #[inline]
    pub(crate) fn pop(&mut self, deque: &Worker<usize>) -> Option<usize> {
        share_half(&mut self.0, || deque.is_empty(), |e| deque.push(e));
        self.0.pop()
    }

    /// The top entry, sharing nothing.
    #[inline]
    pub(crate) fn pop_own(&mut self) -> Option<usize> {
        self.0.pop()
    }

    /// Hands everything the stack, then `deque`, holds to `out`.
    pub(crate) fn drain_into(&mut self, deque: &Worker<usize>, mut out: impl FnMut(usize)) {
        self.0
            .drain(..)
            .chain(std::iter::from_fn(|| deque.pop()))
            .for_each(&mut out);
    }
}

/// A GC thread's sharing ([`MarkStack`]): if `stack` holds two entries or
/// more and `deque_empty` says so, moves the bottom half of it, oldest
/// first, to `share`. (The loom model of the mark's termination,
/// `assist_model.rs`, shares through this too.)
#[inline]
pub(crate) fn share_half(
    stack: &mut Vec<usize>,
    deque_empty: impl FnOnce() -> bool,
    share: impl FnMut(usize),
) {
    if stack.len() >= 2 && deque_empty() {
        let half = stack.len() / 2;
        stack.drain(..half).for_each(share);
    }
}
