//! Cross-QP reorder policies (a process-wide setting, hence its own test binary). The
//! engine runs inline only, so nothing executes until the test polls.

mod common;

use common::*;
use vqp_host::sys::*;
use vqp_host::{connect, CompletionQueue, Context, QpInit, QueuePair};
use vqp_softverbs::{Progress, Reorder, ADVERSARIAL_BOUND};

static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());

struct Fan {
    cq: CompletionQueue,
    qps: Vec<QueuePair>,
    _peers: Vec<QueuePair>,
    mr: vqp_host::MemoryRegion,
    peer_mr: vqp_host::MemoryRegion,
    _ctx: (Context, Context),
}

/// `n` QPs on soft0 sharing one CQ, each connected to its own QP on soft1.
fn fan(n: usize) -> Fan {
    vqp_softverbs::set_progress(Progress::Inline);
    let v = verbs();
    let c0 = Context::open(&v, Some("soft0")).unwrap();
    let c1 = Context::open(&v, Some("soft1")).unwrap();
    let (pd0, pd1) = (c0.alloc_pd().unwrap(), c1.alloc_pd().unwrap());
    let cq = c0.create_cq(4096, None, 0).unwrap();
    let cq1 = c1.create_cq(64, None, 0).unwrap();
    let cap = vqp_host::QpCap {
        max_send_wr: 256,
        ..Opts::default().cap
    };
    let mut qps = Vec::new();
    let mut peers = Vec::new();
    for _ in 0..n {
        let a = pd0.create_qp(&QpInit::rc(&cq, cap)).unwrap();
        let b = pd1.create_qp(&QpInit::rc(&cq1, cap)).unwrap();
        let pa = connect::Path::new(1, connect::Address::lid(2), b.qp_num(), 0, 0);
        let pb = connect::Path::new(1, connect::Address::lid(1), a.qp_num(), 0, 0);
        connect::connect(&a, &pa).unwrap();
        connect::connect(&b, &pb).unwrap();
        qps.push(a);
        peers.push(b);
    }
    let mr = pd0
        .register_buffer(4096, vqp_host::AccessFlags::ALL_REMOTE)
        .unwrap();
    let peer_mr = pd1
        .register_buffer(4096, vqp_host::AccessFlags::ALL_REMOTE)
        .unwrap();
    Fan {
        cq,
        qps,
        _peers: peers,
        mr,
        peer_mr,
        _ctx: (c0, c1),
    }
}

impl Fan {
    fn post(&self, qp: usize, wr_id: u64) {
        let mut sge = self.mr.sge(0, 8).unwrap();
        let mut w = send_wr(wr_id, IBV_WR_RDMA_WRITE, std::slice::from_mut(&mut sge));
        rdma(&mut w, &self.peer_mr, 0);
        // SAFETY: a valid WR over live buffers.
        unsafe { self.qps[qp].post_send(&mut w) }.unwrap();
    }

    /// Posts 4 WRs to each QP in turn, then runs everything; the completion order.
    fn run(&self) -> Vec<u64> {
        for q in 0..self.qps.len() {
            for i in 0..4 {
                self.post(q, q as u64 * 100 + i);
            }
        }
        let n = self.qps.len() * 4;
        poll_n(&self.cq, n).iter().map(|w| w.wr_id()).collect()
    }
}

fn per_qp_order_kept(order: &[u64]) {
    for q in 0..3u64 {
        let mine: Vec<u64> = order.iter().copied().filter(|id| id / 100 == q).collect();
        assert_eq!(
            mine,
            (0..4).map(|i| q * 100 + i).collect::<Vec<_>>(),
            "{order:?}"
        );
    }
}

#[test]
fn fifo_keeps_global_posting_order() {
    let _g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    vqp_softverbs::set_reorder(Reorder::Fifo);
    let f = fan(3);
    let order = f.run();
    assert_eq!(order, [0, 1, 2, 3, 100, 101, 102, 103, 200, 201, 202, 203]);
}

#[test]
fn random_is_seeded_and_keeps_per_qp_order() {
    let _g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let f = fan(3);
    let mut differs = false;
    for seed in 1..6 {
        vqp_softverbs::set_reorder(Reorder::Random { seed });
        let first = f.run();
        vqp_softverbs::set_reorder(Reorder::Random { seed });
        let second = f.run();
        assert_eq!(first, second, "same seed, same schedule");
        per_qp_order_kept(&first);
        differs |= first != [0, 1, 2, 3, 100, 101, 102, 103, 200, 201, 202, 203];
    }
    assert!(differs, "some seed reorders across QPs");
    vqp_softverbs::set_reorder(Reorder::Fifo);
}

#[test]
fn adversarial_serves_newest_first_but_never_starves() {
    let _g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    vqp_softverbs::set_reorder(Reorder::Adversarial);
    let f = fan(3);
    let order = f.run();
    assert_eq!(order[0], 200, "the newest post runs first: {order:?}");
    per_qp_order_kept(&order);

    // QP 0 posts once, then QP 1 posts many: QP 0 is passed over, but for no more
    // than the bound.
    let k = 2 * ADVERSARIAL_BOUND + 8;
    f.post(0, 9999);
    for i in 0..k.min(60) {
        f.post(1, i);
    }
    for i in 0..k.saturating_sub(60) {
        f.post(2, i);
    }
    let order: Vec<u64> = poll_n(&f.cq, k as usize + 1)
        .iter()
        .map(|w| w.wr_id())
        .collect();
    let pos = order.iter().position(|&id| id == 9999).unwrap() as u64;
    assert!(pos > 0, "QP 0 was passed over at first: {order:?}");
    assert!(
        pos <= ADVERSARIAL_BOUND + 1,
        "QP 0 waited {pos} steps: {order:?}"
    );
    vqp_softverbs::set_reorder(Reorder::Fifo);
}
