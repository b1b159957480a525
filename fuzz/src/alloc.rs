//! A global allocator that counts the bytes allocated while a closure runs, so a target can
//! assert that decoding `n` bytes never allocates far more than `n` (a length field read from
//! untrusted bytes must not size a buffer by itself). Only the peer-message target installs it.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

/// Counts bytes requested from the system allocator on the current thread.
pub struct Counting;

thread_local! {
    static ALLOCATED: Cell<usize> = const { Cell::new(0) };
}

// SAFETY: every call is forwarded unchanged to the system allocator; the counter is a plain
// thread-local `Cell` that never allocates.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count(layout.size());
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count(layout.size());
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count(new_size.saturating_sub(layout.size()));
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
}

fn count(bytes: usize) {
    let _ = ALLOCATED.try_with(|total| total.set(total.get().saturating_add(bytes)));
}

/// Runs `f` and returns its result with the bytes it allocated (growth of a reallocation counts
/// as new bytes; frees are not subtracted). Meaningful only with `Counting` installed.
pub fn measure<T>(f: impl FnOnce() -> T) -> (T, usize) {
    let before = ALLOCATED.with(Cell::get);
    let value = f();
    let after = ALLOCATED.with(Cell::get);
    (value, after - before)
}
