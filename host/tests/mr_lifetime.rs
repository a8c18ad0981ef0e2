//! A registered buffer stays allocated for as long as it is registered: when
//! `ibv_dereg_mr` refuses, dropping the `MemoryRegion` leaks the buffer rather than
//! free memory the device may still reach by the region's keys.
//!
//! A counting global allocator counts page-aligned frees (only registered buffers are
//! page-aligned here). This file holds one test, so nothing else frees meanwhile.

mod spy;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};

use vqp_host::{AccessFlags, Context};

struct Counting;

/// Frees of page-aligned blocks.
static PAGE_FREES: AtomicU64 = AtomicU64::new(0);

// SAFETY: every call is forwarded unchanged to `System`, which upholds the contract;
// the counter is an atomic that never allocates.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's layout, which meets `alloc`'s contract.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if layout.align() == 4096 {
            PAGE_FREES.fetch_add(1, Ordering::SeqCst);
        }
        // SAFETY: `ptr` came from `System` with this layout (every allocation goes there).
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

#[test]
fn a_buffer_whose_deregistration_is_refused_is_not_freed() {
    let _serial = spy::serial();
    let ctx = Context::open(&spy::verbs(), None).unwrap();
    let pd = ctx.alloc_pd().unwrap();

    let mr = pd.register_buffer(8192, AccessFlags::ALL_REMOTE).unwrap();
    let before = PAGE_FREES.load(Ordering::SeqCst);
    drop(mr);
    assert_eq!(
        PAGE_FREES.load(Ordering::SeqCst),
        before + 1,
        "deregistered, freed"
    );

    let mr = pd.register_buffer(8192, AccessFlags::ALL_REMOTE).unwrap();
    spy::REFUSE_DEREG.store(true, Ordering::SeqCst);
    let before = PAGE_FREES.load(Ordering::SeqCst);
    drop(mr);
    spy::REFUSE_DEREG.store(false, Ordering::SeqCst);
    assert_eq!(
        PAGE_FREES.load(Ordering::SeqCst),
        before,
        "still registered: the buffer must outlive the drop"
    );
}
