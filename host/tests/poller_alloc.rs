//! After set-up and warm-up, submitting requests through a poll thread and taking their
//! completions allocates nothing, in the application thread or the poll thread (over
//! vqp-sim's no-op providers, which allocate nothing themselves).
//!
//! A counting global allocator counts every allocation of every thread while the
//! measured loop runs. This file holds one test, so no other test allocates meanwhile.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use vqp_core::split::SplitPolicy;
use vqp_core::{Config, Keys, Mode, Opcode, RecvWr, SendWr, VirtualCq, VirtualQp, WcStatus};
use vqp_host::{Event, Handle, Idle, PollThread, PollerConfig, Stack};
use vqp_sim::noop::{NoopConfig, NoopCq, NoopQp};

/// Counts allocations and bytes while `COUNTING` is set.
struct Counting;

static COUNTING: AtomicBool = AtomicBool::new(false);
static ALLOCS: AtomicU64 = AtomicU64::new(0);
static BYTES: AtomicU64 = AtomicU64::new(0);

fn note(size: usize) {
    if COUNTING.load(Ordering::Relaxed) {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        BYTES.fetch_add(size as u64, Ordering::Relaxed);
    }
}

// SAFETY: every call is forwarded unchanged to `System`, which upholds the contract;
// the counters are atomics that never allocate.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        // SAFETY: forwarded with the caller's layout, which meets `alloc`'s contract.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        // SAFETY: as `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System` with this layout (see `alloc`).
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(new_size);
        // SAFETY: forwarded unchanged; `ptr` and `layout` come from this allocator.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

type Vqp = VirtualQp<NoopQp, 4, 32, 128, 256>;
type Vcq = VirtualCq<NoopCq, 1, 32>;

const RING: usize = 64;
const BATCH: usize = 8;

/// A sender over 4 QPs (virtual QP 1, 64 KiB writes in 16 KiB fragments) and a
/// single-QP receiver (virtual QP 2, notification receives the no-op QP completes at
/// once).
fn factory() -> vqp_host::Result<Stack<NoopQp, NoopCq, 4, 32, 128, 256, 1, 32>> {
    let cq = NoopCq::new(NoopConfig::default());
    let cfg = |qp_num| Config {
        split: SplitPolicy::new(16 << 10),
        max_outstanding: 32,
        recv_depth: 32,
        qp_num,
        ..Config::new(Mode::Dqplb)
    };
    let mut tx = Vqp::new(cfg(1), (0..4).map(|i| (cq.create_qp(0x10 + i), 0)), None)?;
    let mut rx = Vqp::new(cfg(2), [(cq.create_qp(0x20), 0)], None)?;
    let mut vcq = Vcq::new();
    vcq.add_cq(cq, 0, 4096)?;
    vcq.attach(&mut tx)?;
    vcq.attach(&mut rx)?;
    Ok(Stack::new(vcq, vec![tx, rx]))
}

/// One round: `BATCH` writes and `BATCH` receives in, their `2 × BATCH` events out.
fn round(tx: &mut Handle<RING>, rx: &mut Handle<RING>, id: &mut u64, events: &mut [Event]) {
    for _ in 0..BATCH {
        let wr = SendWr::new(
            *id,
            Opcode::RDMA_WRITE,
            0x1000,
            64 << 10,
            0x2000,
            Keys::single(1, 2),
        );
        tx.send(wr)
            .expect("room: the previous round was fully collected");
        rx.recv(RecvWr::notification(*id))
            .expect("room: the previous round was fully collected");
        *id += 1;
    }
    let (mut got_tx, mut got_rx) = (0, 0);
    let deadline = Instant::now() + Duration::from_secs(20);
    while got_tx < BATCH || got_rx < BATCH {
        let n = tx.poll_many(events);
        for e in &events[..n] {
            assert!(matches!(e, Event::Completed(wc) if wc.status == WcStatus::SUCCESS));
        }
        got_tx += n;
        got_rx += rx.poll_many(events);
        assert!(Instant::now() < deadline, "stuck at {got_tx} / {got_rx}");
        std::hint::spin_loop();
    }
}

#[test]
fn submit_and_complete_through_a_poll_thread_allocate_nothing() {
    let (poller, mut handles) = PollThread::<RING>::spawn(
        PollerConfig {
            idle: Idle::Spin,
            ..PollerConfig::default()
        },
        2,
        factory,
    )
    .unwrap();
    let mut rx = handles.pop().unwrap();
    let mut tx = handles.pop().unwrap();
    let mut events = [Event::Completed(vqp_core::Wc::EMPTY); 16];
    let mut id = 0;

    // The counter sees allocations (of any thread).
    COUNTING.store(true, Ordering::SeqCst);
    drop(std::hint::black_box(vec![0u8; 16]));
    COUNTING.store(false, Ordering::SeqCst);
    assert!(ALLOCS.swap(0, Ordering::SeqCst) > 0, "the counter works");
    BYTES.store(0, Ordering::SeqCst);

    for _ in 0..200 {
        round(&mut tx, &mut rx, &mut id, &mut events);
    }
    COUNTING.store(true, Ordering::SeqCst);
    for _ in 0..2000 {
        round(&mut tx, &mut rx, &mut id, &mut events);
    }
    COUNTING.store(false, Ordering::SeqCst);
    let (allocs, bytes) = (ALLOCS.load(Ordering::SeqCst), BYTES.load(Ordering::SeqCst));

    let stats = poller.drain(Duration::from_secs(10)).unwrap();
    assert_eq!(
        (allocs, bytes),
        (0, 0),
        "allocations on the data path (either thread)"
    );
    assert_eq!(stats.submitted, 2 * BATCH as u64 * 2200);
    assert_eq!(stats.completed, stats.submitted);
    assert!(!stats.timed_out && stats.undelivered.is_empty());
}
