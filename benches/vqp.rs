//! The engine over a no-op provider, one thread, next to a baseline built from the
//! reference's data structures driving the same workload. Every vqp case first
//! proves that its loop allocates nothing.
//!
//! Workloads follow the reference's published measurements (DESIGN §6):
//! A: 1-fragment write on 4 QPs; B: 1 MiB in 16 × 64 KiB over 4 QPs, completions
//! shuffled across QPs; C: single-QP pass-through; D: DQPLB reorder window;
//! E: DQPLB receiver per fragment; F: the striping policies' cost.

mod support;

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use vqp_core::imm::Imm;
use vqp_core::reorder::ReorderWindow;
use vqp_core::seq::Seq;
use vqp_core::{Opcode, PhysCq, PhysWc, Policy, RecvWr, SendFlags, SendWqe, SendWr, Signaling};
use vqp_sim::noop::{NoopCq, NoopOrder, NoopQp, RecvMode};

use support::alloc::{per_run, Counting};
use support::reference::{RefReorder, RefTracker};
use support::rig::{noop_cq, rig, striped_rig, write, Rig};

#[global_allocator]
static ALLOC: Counting = Counting;

/// The no-op provider alone: the physical chains a request becomes, posted straight
/// to the QPs, and the CQ polled until their completions are back. What the engine
/// adds is a vqp line less this one, measured in the same run.
struct Bare {
    cq: NoopCq,
    qps: Vec<NoopQp>,
    chain: Vec<SendWqe>,
    signaled: usize,
    scratch: [PhysWc; 32],
}

impl Bare {
    /// `qps` chains of `per_chain` 64 KiB writes, the last of each chain signaled (or
    /// every WQE).
    fn new(qps: u32, order: NoopOrder, per_chain: usize, every: bool) -> Self {
        let cq = noop_cq(order, RecvMode::Complete);
        let qps: Vec<NoopQp> = (0..qps).map(|i| cq.create_qp(100 + i)).collect();
        let chain: Vec<SendWqe> = (0..per_chain)
            .map(|i| SendWqe {
                wr_id: i as u64,
                opcode: Opcode::RDMA_WRITE,
                flags: if every || i + 1 == per_chain {
                    SendFlags::SIGNALED
                } else {
                    SendFlags::NONE
                },
                addr: 0x10_0000 + (i as u64) * (64 << 10),
                len: 64 << 10,
                lkey: 1,
                remote_addr: 0x20_0000 + (i as u64) * (64 << 10),
                rkey: 2,
                ..SendWqe::EMPTY
            })
            .collect();
        let signaled = qps.len() * if every { per_chain } else { 1 };
        Self {
            cq,
            qps,
            chain,
            signaled,
            scratch: [PhysWc::EMPTY; 32],
        }
    }

    /// Post one chain per QP and poll until every completion is back.
    #[inline]
    fn round(&mut self) {
        self.post_chains();
        self.poll_all(self.signaled);
    }

    /// Post one chain per QP.
    #[inline]
    fn post_chains(&mut self) {
        for qp in &mut self.qps {
            qp.post_send(black_box(&self.chain)).expect("accepted");
        }
    }

    /// Poll until `left` completions came back.
    #[inline]
    fn poll_all(&mut self, mut left: usize) {
        while left > 0 {
            let n = self.cq.poll(&mut self.scratch).expect("poll");
            black_box(&self.scratch[..n]);
            left -= n;
        }
    }
}

fn reference(qps: u32, order: NoopOrder) -> RefTracker<NoopQp, NoopCq> {
    let cq = noop_cq(order, RecvMode::Complete);
    let data = (0..qps).map(|i| cq.create_qp(100 + i)).collect();
    RefTracker::new(data, cq, 64 << 10, 64)
}

fn ref_post_complete(r: &mut RefTracker<NoopQp, NoopCq>, wr: &SendWr) {
    r.post(wr);
    loop {
        let done = r.poll();
        if !done.is_empty() {
            black_box(done);
            return;
        }
    }
}

fn assert_no_alloc(what: &str, f: impl FnMut()) {
    let per = per_run(2000, f);
    assert_eq!(per, 0.0, "{what} allocated {per} times per operation");
}

fn shuffled() -> NoopOrder {
    NoopOrder::Shuffled { seed: 0x5eed }
}

fn bench_a(c: &mut Criterion) {
    let mut g = c.benchmark_group("A 1-fragment write, 4 QPs");
    g.throughput(Throughput::Elements(1));
    let wr = write(4096);
    let mut r = rig(
        4,
        NoopOrder::Fifo,
        Signaling::LastOfChain,
        RecvMode::Complete,
    );
    assert_no_alloc("vqp post+complete", || r.post_complete(&wr));
    g.bench_function("vqp post+completion", |b| b.iter(|| r.post_complete(&wr)));
    let mut bare = Bare::new(1, NoopOrder::Fifo, 1, false);
    g.bench_function("no-op provider alone (1 WQE, 1 CQE)", |b| {
        b.iter(|| bare.round())
    });
    let mut base = reference(4, NoopOrder::Fifo);
    eprintln!(
        "reference post+completion allocates {:.1} times per request",
        per_run(2000, || ref_post_complete(&mut base, &wr))
    );
    g.bench_function("reference post+completion", |b| {
        b.iter(|| ref_post_complete(&mut base, &wr))
    });
    g.finish();

    let mut g = c.benchmark_group("A post + completion, 32 in flight");
    g.throughput(Throughput::Elements(32));
    g.bench_function("vqp", |b| {
        b.iter(|| {
            for _ in 0..32 {
                r.vqp.post_send(black_box(&wr)).expect("accepted");
            }
            r.poll_until(32);
        })
    });
    let mut bare = Bare::new(1, NoopOrder::Fifo, 1, false);
    g.bench_function("no-op provider alone (32 posts of 1 WQE, 32 CQEs)", |b| {
        b.iter(|| {
            for _ in 0..32 {
                bare.qps[0]
                    .post_send(black_box(&bare.chain))
                    .expect("accepted");
            }
            let mut left = 32;
            while left > 0 {
                let n = bare.cq.poll(&mut bare.scratch).expect("poll");
                black_box(&bare.scratch[..n]);
                left -= n;
            }
        })
    });
    g.bench_function("reference", |b| {
        b.iter(|| {
            for _ in 0..32 {
                base.post(black_box(&wr));
            }
            let mut left = 32;
            while left > 0 {
                left -= base.poll().len();
            }
        })
    });
    g.finish();

    let mut g = c.benchmark_group("A post alone, 32 in flight");
    g.throughput(Throughput::Elements(32));
    assert_no_alloc("vqp post x32", || {
        for _ in 0..32 {
            r.vqp.post_send(&wr).expect("accepted");
        }
        r.poll_until(32);
    });
    g.bench_function("vqp", |b| b.iter_custom(|iters| r.posts_alone(&wr, iters)));
    g.bench_function("reference", |b| {
        b.iter_custom(|iters| {
            let mut spent = Duration::ZERO;
            for _ in 0..iters {
                let t = Instant::now();
                for _ in 0..32 {
                    base.post(black_box(&wr));
                }
                spent += t.elapsed();
                let mut left = 32;
                while left > 0 {
                    left -= base.poll().len();
                }
            }
            spent
        })
    });
    g.finish();
}

fn bench_b(c: &mut Criterion) {
    let mut g = c.benchmark_group("B 1 MiB as 16 x 64 KiB over 4 QPs, shuffled");
    g.throughput(Throughput::Elements(1));
    let big = write(1 << 20);
    let small = write(64 << 10);
    for (name, signaling) in [
        ("vqp last-of-chain signaled", Signaling::LastOfChain),
        ("vqp every WQE signaled", Signaling::Every),
    ] {
        let mut r = rig(4, shuffled(), signaling, RecvMode::Complete);
        assert_no_alloc(name, || r.post_complete(&big));
        g.bench_function(name, |b| b.iter(|| r.post_complete(&big)));
    }
    let mut r = rig(4, shuffled(), Signaling::LastOfChain, RecvMode::Complete);
    g.bench_function("vqp 1 fragment (for the per-fragment difference)", |b| {
        b.iter(|| r.post_complete(&small))
    });
    for (name, every) in [
        ("no-op provider alone, 4 chains of 4, last signaled", false),
        (
            "no-op provider alone, 4 chains of 4, every WQE signaled",
            true,
        ),
    ] {
        let mut bare = Bare::new(4, shuffled(), 4, every);
        g.bench_function(name, |b| b.iter(|| bare.round()));
    }
    let mut base = reference(4, shuffled());
    g.bench_function("reference", |b| {
        b.iter(|| ref_post_complete(&mut base, &big))
    });
    g.finish();

    // The completion side alone: 4 requests (64 WQEs, every one signaled) are posted
    // untimed, then the polls that route and aggregate their 64 completions are timed.
    const REQUESTS: usize = 4;
    let mut g = c.benchmark_group("B completions alone, every WQE signaled, shuffled");
    g.throughput(Throughput::Elements(16 * REQUESTS as u64));
    let mut r = rig(4, shuffled(), Signaling::Every, RecvMode::Complete);
    assert_no_alloc("vqp polls", || {
        for _ in 0..REQUESTS {
            r.vqp.post_send(&big).expect("accepted");
        }
        r.poll_until(REQUESTS);
    });
    g.bench_function("vqp", |b| {
        b.iter_custom(|iters| {
            let mut spent = Duration::ZERO;
            for _ in 0..iters {
                for _ in 0..REQUESTS {
                    r.vqp.post_send(black_box(&big)).expect("accepted");
                }
                let t = Instant::now();
                r.poll_until(REQUESTS);
                spent += t.elapsed();
            }
            spent
        })
    });
    let mut bare = Bare::new(4, shuffled(), 4, true);
    g.bench_function("no-op provider alone", |b| {
        b.iter_custom(|iters| {
            let mut spent = Duration::ZERO;
            for _ in 0..iters {
                for _ in 0..REQUESTS {
                    bare.post_chains();
                }
                let t = Instant::now();
                bare.poll_all(REQUESTS * bare.signaled);
                spent += t.elapsed();
            }
            spent
        })
    });
    g.bench_function("reference", |b| {
        b.iter_custom(|iters| {
            let mut spent = Duration::ZERO;
            for _ in 0..iters {
                for _ in 0..REQUESTS {
                    base.post(black_box(&big));
                }
                let t = Instant::now();
                let mut left = REQUESTS;
                while left > 0 {
                    left -= base.poll().len();
                }
                spent += t.elapsed();
            }
            spent
        })
    });
    g.finish();
}

fn bench_c(c: &mut Criterion) {
    let mut g = c.benchmark_group("C single-QP pass-through");
    g.throughput(Throughput::Elements(1));
    let wr = write(4096);
    let mut r = rig(
        1,
        NoopOrder::Fifo,
        Signaling::LastOfChain,
        RecvMode::Complete,
    );
    assert_no_alloc("vqp pass-through", || r.post_complete(&wr));
    g.bench_function("vqp post+completion", |b| b.iter(|| r.post_complete(&wr)));
    let mut base = reference(1, NoopOrder::Fifo);
    g.bench_function("reference post+completion", |b| {
        b.iter(|| ref_post_complete(&mut base, &wr))
    });
    g.finish();

    let mut g = c.benchmark_group("C single-QP pass-through, post alone, 32 in flight");
    g.throughput(Throughput::Elements(32));
    g.bench_function("vqp", |b| b.iter_custom(|iters| r.posts_alone(&wr, iters)));
    g.finish();
}

/// Sequence numbers `0..n`, each block of `block` reversed or shuffled, with the
/// notify bit on every 16th.
fn arrivals(n: u32, block: u32, seed: u64) -> Vec<(u32, bool)> {
    let mut seqs: Vec<u32> = (0..n).collect();
    let mut x = seed;
    for chunk in seqs.chunks_mut(block as usize) {
        for i in (1..chunk.len()).rev() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            chunk.swap(i, (x % (i as u64 + 1)) as usize);
        }
    }
    seqs.into_iter().map(|s| (s, s % 16 == 15)).collect()
}

fn bench_d(c: &mut Criterion) {
    const N: u32 = 4096;
    let mut g = c.benchmark_group("D DQPLB arrival");
    g.throughput(Throughput::Elements(u64::from(N)));
    for (name, block) in [("in order", 1), ("shuffled within 64", 64)] {
        let input = arrivals(N, block, 0x1234);
        let imms: Vec<Imm> = input
            .iter()
            .map(|&(s, n)| Imm::new(Seq::new(s), n))
            .collect();
        g.bench_function(format!("vqp window, {name}"), |b| {
            b.iter_batched_ref(
                || ReorderWindow::<256>::new(Seq::new(0)),
                |w| {
                    let mut messages = 0u32;
                    for imm in &imms {
                        w.arrive(*imm, 4096, |_| messages += 1).expect("in window");
                    }
                    black_box(messages)
                },
                BatchSize::SmallInput,
            )
        });
        g.bench_function(format!("reference set, {name}"), |b| {
            b.iter_batched_ref(
                RefReorder::default,
                |r| {
                    let mut messages = 0u32;
                    for &(s, n) in &input {
                        messages += r.arrive(s, n);
                    }
                    black_box(messages)
                },
                BatchSize::SmallInput,
            )
        });
    }
    g.finish();
}

fn bench_e(c: &mut Criterion) {
    let mut g = c.benchmark_group("E DQPLB receiver");
    // 16 fragments per message, notify on the last, one notification receive each.
    g.throughput(Throughput::Elements(16));
    let mut r = rig(4, NoopOrder::Fifo, Signaling::LastOfChain, RecvMode::Hold);
    r.vqp.arm_receiver();
    let mut seq = Seq::new(0);
    let mut message = |r: &mut Rig| {
        r.vqp
            .post_recv(&RecvWr::notification(1))
            .expect("receive slot");
        for i in 0..16u32 {
            let imm = Imm::new(seq, i == 15).to_wire();
            seq = seq.add(1);
            r.control
                .deliver_imm(100 + (i % 4), imm, 64 << 10)
                .expect("receive held");
        }
        r.poll_until(1);
    };
    assert_no_alloc("vqp DQPLB receive", || message(&mut r));
    g.bench_function("vqp per 16-fragment message", |b| {
        b.iter(|| message(&mut r))
    });
    g.finish();
}

/// F: what choosing a QP per fragment costs under each policy: 1 MiB as 16 × 64 KiB
/// over 4 QPs weighing 1, 1, 3, 3 (round-robin ignores the weights), completions
/// shuffled. A policy's cost per fragment is its line less round-robin's, over 16.
/// The adaptive line also asks for a sample every request, on a clock that makes one
/// due every 16th (it re-weighs then, from what the no-op provider completed).
fn bench_f(c: &mut Criterion) {
    let mut g = c.benchmark_group("F striping policy, 1 MiB as 16 x 64 KiB over 4 QPs, shuffled");
    g.throughput(Throughput::Elements(16));
    let big = write(1 << 20);
    for policy in [
        Policy::RoundRobin,
        Policy::Weighted,
        Policy::LeastOutstanding,
        Policy::Adaptive,
    ] {
        let mut r = striped_rig(
            4,
            shuffled(),
            Signaling::LastOfChain,
            RecvMode::Complete,
            policy,
        );
        for (i, w) in [1, 1, 3, 3].into_iter().enumerate() {
            r.vqp.set_weight(i, w);
        }
        let mut now = 0u64;
        let adapt = r.vqp.config().adapt_ns / 16;
        let name = format!("vqp {}", policy.name());
        assert_no_alloc(&name, || {
            now += adapt;
            r.vqp.sample(now);
            r.post_complete(&big)
        });
        g.bench_function(&name, |b| {
            b.iter(|| {
                now += adapt;
                r.vqp.sample(black_box(now));
                r.post_complete(&big)
            })
        });
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    targets = bench_a, bench_b, bench_c, bench_d, bench_e, bench_f
}
criterion_main!(benches);
