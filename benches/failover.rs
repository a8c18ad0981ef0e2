//! What surviving a path costs in time, on in-process softverbs: A (soft0) writes to
//! B (soft1) over two data QPs in DQPLB with re-dispatch on.
//!
//! - `no_failure`: a 512 KiB write posted and reported done, for comparison.
//! - `failure_to_completion`: the same write (8 fragments, 4 on each QP) is posted
//!   and data QP 1 fails at once, as a fatal QP error; timed from the failure until
//!   the write is reported done, which needs the failed QP's fragments to go again on
//!   QP 0 and complete there (an upper bound on the first re-dispatched fragment's
//!   completion; posted before the failure, the write's fragments wait for softverbs'
//!   engine, which runs when A polls). The QP is replaced (untimed) before the next
//!   round.
//! - `link_up_to_traffic`: soft0's link goes down under a write, both of A's QPs fail
//!   and the write is held; timed from the link coming back until the held write is
//!   reported done: the port seen active, both QPs replaced through the three
//!   fail-back messages (carried by direct calls here, by TCP in a deployment), the
//!   write posted on the replacements and completed.

use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion};
use vqp::core::split::SplitPolicy;
use vqp::core::{Config, Keys, Mode, Opcode, RecvWr, SendWr, Wc};
use vqp::host::{AccessFlags, Connected, Context, Endpoint, MemoryRegion, Settings, Verbs};
use vqp_softverbs::QpSelector;

type Ep = Endpoint<2, 64, 256, 512, 1, 16>;
type Conn = Connected<2, 64, 256, 512, 1, 16>;

const MSG: u64 = 512 << 10;

struct Pair {
    a: Conn,
    b: Conn,
    mr_a: MemoryRegion,
    mr_b: MemoryRegion,
    next: u64,
}

fn pair() -> Pair {
    // SAFETY: softverbs' table implements the libibverbs ABI.
    let verbs = unsafe { Verbs::from_table(vqp_softverbs::verbs_table()) };
    let open = |dev: &str| Context::open(&verbs, Some(dev)).expect("softverbs device");
    let (pa, pb) = (
        open("soft0").alloc_pd().expect("pd"),
        open("soft1").alloc_pd().expect("pd"),
    );
    let settings = |qp_num| {
        Settings::new(
            Config {
                split: SplitPolicy::new(64 << 10),
                max_outstanding: 64,
                recv_depth: 64,
                qp_num,
                redispatch: true,
                grace_ns: 10_000_000_000,
                ..Config::new(Mode::Dqplb)
            },
            2,
        )
    };
    let ea = Ep::create(&pa, &settings(0xa), None).expect("endpoint");
    let eb = Ep::create(&pb, &settings(0xb), None).expect("endpoint");
    let (ca, cb) = (ea.card(), eb.card());
    Pair {
        a: ea.connect(&cb).expect("connect"),
        b: eb.connect(&ca).expect("connect"),
        mr_a: pa
            .register_buffer(MSG as usize, AccessFlags::ALL_REMOTE)
            .expect("mr"),
        mr_b: pb
            .register_buffer(MSG as usize, AccessFlags::ALL_REMOTE)
            .expect("mr"),
        next: 0,
    }
}

impl Pair {
    /// Posts one write A → B and B's receive for it; returns its id.
    fn post(&mut self) -> u64 {
        let id = self.next;
        self.next += 1;
        self.b
            .vqp
            .post_recv(&RecvWr::notification(id))
            .expect("receive");
        let wr = SendWr::new(
            id,
            Opcode::RDMA_WRITE_WITH_IMM,
            self.mr_a.addr(),
            MSG,
            self.mr_b.addr(),
            Keys::single(self.mr_a.lkey(), self.mr_b.rkey()),
        );
        self.a.vqp.post_send(&wr).expect("post");
        id
    }

    /// Polls both sides until A reported `id` and B its receive; panics on an error
    /// or after 10 s.
    fn wait(&mut self, id: u64) {
        let (mut at_a, mut at_b) = (false, false);
        let start = Instant::now();
        let mut out = [Wc::EMPTY; 16];
        while !(at_a && at_b) {
            for (side, done) in [(&mut self.a, &mut at_a), (&mut self.b, &mut at_b)] {
                let n = side.vcq.poll(&mut [&mut side.vqp], &mut out).expect("poll");
                for wc in &out[..n] {
                    assert!(wc.status.is_ok(), "{wc:?}");
                    *done |= wc.wr_id == id;
                }
            }
            assert!(start.elapsed() < Duration::from_secs(10), "stuck at {id}");
        }
    }

    /// Replaces every failed data QP of A through the three fail-back messages.
    fn fail_back(&mut self) {
        for i in 0..self.a.vqp.data_qps() {
            if !self.a.vqp.data_qp_failed(i) {
                continue;
            }
            let offer = self.a.offer_rejoin(i).expect("offer");
            let answer = self.b.on_failback(offer).expect("answer").expect("one");
            let ready = self.a.on_failback(answer).expect("ready").expect("one");
            assert_eq!(self.b.on_failback(ready).expect("taken"), None);
        }
    }
}

fn failure_to_completion(c: &mut Criterion) {
    let mut p = pair();
    c.bench_function("failover/failure_to_completion", |b| {
        b.iter_custom(|rounds| {
            let mut total = Duration::ZERO;
            for _ in 0..rounds {
                let before = p.a.vqp.failover().redispatched;
                let id = p.post();
                let qpn = p.a.vqp.data_qp_num(1).expect("QP 1");
                let t0 = Instant::now();
                assert_eq!(vqp_softverbs::fail_qp(QpSelector::QpNum(qpn)), 1);
                p.wait(id);
                total += t0.elapsed();
                assert!(p.a.vqp.data_qp_failed(1));
                assert!(
                    p.a.vqp.failover().redispatched > before,
                    "QP 1's fragments went again on QP 0"
                );
                p.fail_back();
                let again = p.post();
                p.wait(again);
            }
            total
        })
    });
}

/// The same write with no failure, posted to completion: what the failure adds.
fn no_failure(c: &mut Criterion) {
    let mut p = pair();
    c.bench_function("failover/no_failure", |b| {
        b.iter_custom(|rounds| {
            let mut total = Duration::ZERO;
            for _ in 0..rounds {
                let t0 = Instant::now();
                let id = p.post();
                p.wait(id);
                total += t0.elapsed();
            }
            total
        })
    });
}

fn link_up_to_traffic(c: &mut Criterion) {
    let mut p = pair();
    let mut g = c.benchmark_group("failover");
    g.sample_size(20);
    g.bench_function("link_up_to_traffic", |b| {
        b.iter_custom(|rounds| {
            let mut total = Duration::ZERO;
            for _ in 0..rounds {
                vqp_softverbs::set_link(0, false).expect("soft0");
                let id = p.post();
                let start = Instant::now();
                let mut out = [Wc::EMPTY; 16];
                while p.a.vqp.failover().healthy > 0 {
                    let _ = p.a.vcq.poll(&mut [&mut p.a.vqp], &mut out);
                    assert!(start.elapsed() < Duration::from_secs(10), "no failure");
                }
                vqp_softverbs::set_link(0, true).expect("soft0");
                let t0 = Instant::now();
                while !p.a.port_active(0).expect("port") {}
                p.fail_back();
                p.wait(id);
                total += t0.elapsed();
            }
            total
        })
    });
    g.finish();
}

criterion_group!(
    benches,
    no_failure,
    failure_to_completion,
    link_up_to_traffic
);
criterion_main!(benches);
