//! An owner-only doubly linked list threaded through its items' own
//! `next` and `prev` fields, with both ends: a heap's page queues (one a
//! size class, and its full pages) and its list of segments.

use std::ptr;

/// An item of a [`Queue`]: where its links are.
///
/// # Safety
/// `next` and `prev` return pointers to two distinct link fields of the
/// item `this` points to, used by no one but the queue it is in.
pub(crate) unsafe trait Linked: Sized {
    /// The item's `next` link.
    ///
    /// # Safety
    /// `this` is a live item.
    unsafe fn next(this: *mut Self) -> *mut *mut Self;

    /// The item's `prev` link.
    ///
    /// # Safety
    /// `this` is a live item.
    unsafe fn prev(this: *mut Self) -> *mut *mut Self;
}

/// A doubly linked list of `T`s (owner only).
pub(crate) struct Queue<T> {
    pub(crate) first: *mut T,
    pub(crate) last: *mut T,
}

impl<T> Clone for Queue<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for Queue<T> {}

impl<T: Linked> Queue<T> {
    pub(crate) const NEW: Queue<T> = Queue {
        first: ptr::null_mut(),
        last: ptr::null_mut(),
    };

    /// # Safety
    /// `p` is a live item in no queue; the caller owns both.
    pub(crate) unsafe fn push_front(&mut self, p: *mut T) {
        // SAFETY: owner-only links of live items (caller).
        unsafe {
            *T::prev(p) = ptr::null_mut();
            *T::next(p) = self.first;
            if self.first.is_null() {
                self.last = p;
            } else {
                *T::prev(self.first) = p;
            }
        }
        self.first = p;
    }

    /// # Safety
    /// `p` is a live item in no queue; the caller owns both.
    pub(crate) unsafe fn push_back(&mut self, p: *mut T) {
        // SAFETY: owner-only links of live items (caller).
        unsafe {
            *T::next(p) = ptr::null_mut();
            *T::prev(p) = self.last;
            if self.last.is_null() {
                self.first = p;
            } else {
                *T::next(self.last) = p;
            }
        }
        self.last = p;
    }

    /// # Safety
    /// `p` is in this queue; the caller owns it.
    pub(crate) unsafe fn remove(&mut self, p: *mut T) {
        // SAFETY: `p` and its neighbours are live items of this queue.
        unsafe {
            let (n, pr) = (*T::next(p), *T::prev(p));
            if pr.is_null() {
                self.first = n;
            } else {
                *T::next(pr) = n;
            }
            if n.is_null() {
                self.last = pr;
            } else {
                *T::prev(n) = pr;
            }
            *T::next(p) = ptr::null_mut();
            *T::prev(p) = ptr::null_mut();
        }
    }

    /// Moves every item of `other` to the back of this queue.
    ///
    /// # Safety
    /// The caller owns both queues and their items.
    pub(crate) unsafe fn append(&mut self, other: &mut Queue<T>) {
        if other.first.is_null() {
            return;
        }
        // SAFETY: owner-only links of live items (caller).
        unsafe {
            if self.last.is_null() {
                self.first = other.first;
            } else {
                *T::next(self.last) = other.first;
                *T::prev(other.first) = self.last;
            }
        }
        self.last = other.last;
        *other = Queue::NEW;
    }
}
