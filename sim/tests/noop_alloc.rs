//! Posting to and polling the no-op provider allocates nothing after construction.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use vqp_core::{Opcode, PhysCq, PhysWc, RecvWqe, SendFlags, SendWqe};
use vqp_sim::noop::{NoopConfig, NoopCq, NoopOrder, RecvMode};

/// Counts allocations made by the current thread.
struct Counting;

thread_local! {
    static ALLOCS: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: every call is forwarded unchanged to `System`, which upholds the contract;
// the counter is a const-initialised thread-local that never allocates.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCS.with(|c| c.set(c.get() + 1));
        // SAFETY: forwarded with the caller's layout, which meets `alloc`'s contract.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System.alloc` with this layout (see `alloc`).
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCS.with(|c| c.set(c.get() + 1));
        // SAFETY: forwarded unchanged; `ptr` and `layout` come from this allocator.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocs() -> u64 {
    ALLOCS.with(Cell::get)
}

#[test]
fn post_poll_and_deliver_allocate_nothing() {
    let probe = allocs();
    drop(std::hint::black_box(vec![0u8; 16]));
    assert!(allocs() > probe, "the counter sees allocations");
    for order in [NoopOrder::Fifo, NoopOrder::Shuffled { seed: 9 }] {
        let mut cq = NoopCq::new(NoopConfig {
            capacity: 256,
            recv_capacity: 64,
            order,
            recv_mode: RecvMode::Hold,
        });
        let mut qps = [
            cq.create_qp(1),
            cq.create_qp(2),
            cq.create_qp(3),
            cq.create_qp(4),
        ];
        let ctl = cq.control();
        let w = SendWqe {
            opcode: Opcode::RDMA_WRITE,
            flags: SendFlags::SIGNALED,
            len: 65536,
            ..SendWqe::default()
        };
        let chain = [w; 4];
        let recvs = [RecvWqe::default(); 8];
        let mut out = [PhysWc::EMPTY; 16];
        let before = allocs();
        let mut polled = 0;
        for _ in 0..1000 {
            for qp in qps.iter_mut() {
                qp.post_send(&chain).unwrap();
                qp.post_recv(&recvs).unwrap();
            }
            for n in 1..=4 {
                for _ in 0..8 {
                    ctl.deliver_imm(n, 0x0100_0000, 0).unwrap();
                }
            }
            loop {
                let n = cq.poll(&mut out).unwrap();
                if n == 0 {
                    break;
                }
                polled += n;
            }
        }
        assert_eq!(allocs() - before, 0, "{order:?}");
        assert_eq!(polled, 1000 * 4 * (4 + 8));
        assert_eq!(cq.overflows(), 0);
    }
}
