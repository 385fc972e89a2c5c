//! The epochs that let page walks run without the segment registry's lock
//! while segments are unlinked and unmapped (`segment.rs`,
//! `for_each_segment_unlocked`), as read-copy-update's grace periods do.
//!
//! A walk counts itself in `walkers[epoch % 2]` of the epoch it began in,
//! and a segment unlinked while any walk runs waits in the list of the
//! parity of the epoch it was unlinked in. The epoch moves on from `e` once
//! no walk of `e - 1` is left, and then what died in `e - 1` is unmapped:
//! only walks of `e` remain, which began after those segments were
//! unlinked, so never stand on them. (Walks of `e - 2` were gone before
//! the epoch reached `e`.) A walk of parity `e` running holds the epoch at
//! `e + 1` at most. With one count for all walks, overlapping walks (two
//! threads calling `for_each_page` in turn) kept every segment freed
//! meanwhile mapped for as long as they overlapped.
//!
//! Plain fields under the registry's lock; the lists are the registry's
//! (intrusive, through the segments). `walk_model.rs` checks, with loom,
//! that no segment is unmapped while a walk may read it.

/// The walk epoch and the walks under way, by parity.
pub(crate) struct WalkEpochs {
    epoch: u64,
    walkers: [usize; 2],
}

impl WalkEpochs {
    pub(crate) const fn new() -> WalkEpochs {
        WalkEpochs {
            epoch: 0,
            walkers: [0; 2],
        }
    }

    /// A walk begins: returns its parity, for [`end`](Self::end).
    pub(crate) fn begin(&mut self) -> usize {
        let p = (self.epoch & 1) as usize;
        self.walkers[p] += 1;
        p
    }

    /// Where a segment unlinked now waits: `None` if no walk runs (it may
    /// be unmapped at once), else the parity of the list it waits in.
    pub(crate) fn defer_to(&self) -> Option<usize> {
        (self.walkers != [0; 2]).then_some((self.epoch & 1) as usize)
    }

    /// A walk of parity `p` ended: moves the epoch on as far as no walk of
    /// the one before holds it, and returns the parities of the lists that
    /// may be released now, in order (at most two).
    pub(crate) fn end(&mut self, p: usize) -> [Option<usize>; 2] {
        // Saturating: a child after `fork` forgot the parent's walks.
        self.walkers[p] = self.walkers[p].saturating_sub(1);
        let mut released = [None; 2];
        for r in &mut released {
            let before = ((self.epoch + 1) & 1) as usize;
            if self.walkers[before] != 0 {
                break;
            }
            *r = Some(before);
            self.epoch += 1;
        }
        released
    }

    /// In a child after `fork`: the parent's walks are on threads the child
    /// does not have; none runs.
    pub(crate) fn forget_walks(&mut self) {
        self.walkers = [0; 2];
    }
}

#[cfg(test)]
mod tests {
    use super::WalkEpochs;

    /// A long walk of one epoch holds back what died during it, while
    /// shorter walks come and go and move the epoch on beside it.
    #[test]
    fn a_long_walk_holds_back_what_died_under_it() {
        let mut e = WalkEpochs::new();
        let long = e.begin();
        let short = e.begin();
        // A segment dies while both run: it waits in `dead`'s list.
        let dead = e.defer_to().expect("walks run");
        // The short walk ends: nothing of `dead`'s list may go (the long
        // walk may stand on it); the epoch moves on once.
        assert!(!e.end(short).contains(&Some(dead)));
        // A walk of the next epoch begins and ends beside the long one.
        let next = e.begin();
        assert_ne!(next, long, "the epoch did not move on");
        assert!(
            !e.end(next).contains(&Some(dead)),
            "released under the long walk"
        );
        // The long walk ends: now it goes.
        assert!(e.end(long).contains(&Some(dead)));
        assert_eq!(e.defer_to(), None);
    }
}
