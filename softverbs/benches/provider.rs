//! The provider's own cost: small RDMA WRITEs in WQEs per second on one core, and
//! 1 MiB WRITEs in bytes per second next to a plain `memcpy` of the same size.
//!
//! The engine runs inline (`Progress::Inline`): the benchmark thread posts, and its
//! `poll_cq` executes and reaps, so everything happens on one core.
//!
//! `cargo bench -p vqp-softverbs --bench provider`

use std::hint::black_box;
use std::ptr::null_mut;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use vqp_host::connect::{self, Address, Path};
use vqp_host::sys::*;
use vqp_host::{
    AccessFlags, CompletionQueue, Context, MemoryRegion, QpCap, QpInit, QueuePair, Verbs, Wc,
};

struct Pair {
    _ctx: (Context, Context),
    cq: CompletionQueue,
    qp: QueuePair,
    _peer: QueuePair,
    src: MemoryRegion,
    dst: MemoryRegion,
}

fn pair(len: usize) -> Pair {
    vqp_softverbs::set_progress(vqp_softverbs::Progress::Inline);
    // SAFETY: the provider's functions implement the libibverbs ABI.
    let v = unsafe { Verbs::from_table(vqp_softverbs::verbs_table()) };
    let c0 = Context::open(&v, Some("soft0")).unwrap();
    let c1 = Context::open(&v, Some("soft1")).unwrap();
    let (pd0, pd1) = (c0.alloc_pd().unwrap(), c1.alloc_pd().unwrap());
    let cq = c0.create_cq(4096, None, 0).unwrap();
    let cq1 = c1.create_cq(64, None, 0).unwrap();
    let cap = QpCap {
        max_send_wr: 1024,
        max_recv_wr: 16,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 64,
    };
    let qp = pd0.create_qp(&QpInit::rc(&cq, cap)).unwrap();
    let peer = pd1.create_qp(&QpInit::rc(&cq1, cap)).unwrap();
    connect::connect(&qp, &Path::new(1, Address::lid(2), peer.qp_num(), 0, 0)).unwrap();
    connect::connect(&peer, &Path::new(1, Address::lid(1), qp.qp_num(), 0, 0)).unwrap();
    let src = pd0.register_buffer(len, AccessFlags::ALL_REMOTE).unwrap();
    let dst = pd1.register_buffer(len, AccessFlags::ALL_REMOTE).unwrap();
    Pair {
        _ctx: (c0, c1),
        cq,
        qp,
        _peer: peer,
        src,
        dst,
    }
}

/// A chain of `n` RDMA WRITEs of `len` bytes; only the last is signaled when
/// `signal_last_only`.
fn chain(
    p: &Pair,
    n: usize,
    len: usize,
    signal_last_only: bool,
    sges: &mut Vec<ibv_sge>,
) -> Vec<ibv_send_wr> {
    sges.clear();
    for i in 0..n {
        sges.push(p.src.sge((i * len) % p.src.len(), len).unwrap());
    }
    let mut wrs: Vec<ibv_send_wr> = (0..n)
        .map(|i| {
            let mut w = ibv_send_wr {
                wr_id: i as u64,
                sg_list: &mut sges[i],
                num_sge: 1,
                opcode: IBV_WR_RDMA_WRITE,
                send_flags: if signal_last_only && i + 1 < n {
                    0
                } else {
                    IBV_SEND_SIGNALED
                },
                ..Default::default()
            };
            w.wr.rdma = ibv_send_wr_rdma {
                remote_addr: p.dst.addr() + ((i * len) % p.dst.len()) as u64,
                rkey: p.dst.rkey(),
            };
            w
        })
        .collect();
    let base = wrs.as_mut_ptr();
    for i in 0..n - 1 {
        // SAFETY: indices within the vector; the last `next` stays null.
        unsafe { (*base.add(i)).next = base.add(i + 1) };
    }
    // SAFETY: index within the vector.
    unsafe { (*base.add(n - 1)).next = null_mut() };
    wrs
}

/// Posts the chain and polls until its `expect` completions arrived.
fn round(p: &Pair, wrs: &mut [ibv_send_wr], expect: usize, wcs: &mut [Wc]) {
    // SAFETY: a valid chain over registered buffers that outlive the completions.
    unsafe { p.qp.post_send(&mut wrs[0]) }.unwrap();
    let mut got = 0;
    while got < expect {
        let polled = p.cq.poll(wcs).unwrap();
        debug_assert!(polled.iter().all(|w| w.is_ok()));
        got += polled.len();
    }
}

fn small_writes(c: &mut Criterion) {
    const CHAIN: usize = 32;
    let p = pair(1 << 16);
    let mut sges = Vec::new();
    let mut g = c.benchmark_group("write_64B");
    g.throughput(Throughput::Elements(CHAIN as u64));
    for (name, last_only) in [("chain32_signal_last", true), ("chain32_signal_all", false)] {
        let mut wrs = chain(&p, CHAIN, 64, last_only, &mut sges);
        let expect = if last_only { 1 } else { CHAIN };
        let mut wcs = [Wc::default(); 64];
        g.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let t = Instant::now();
                for _ in 0..iters {
                    round(&p, &mut wrs, expect, &mut wcs);
                }
                t.elapsed()
            })
        });
    }
    // One WQE per post and per poll: the per-call overhead.
    let mut wrs = chain(&p, 1, 64, false, &mut sges);
    let mut wcs = [Wc::default(); 4];
    g.throughput(Throughput::Elements(1));
    g.bench_function("single", |b| b.iter(|| round(&p, &mut wrs, 1, &mut wcs)));
    g.finish();
}

fn large_writes(c: &mut Criterion) {
    const LEN: usize = 1 << 20;
    let p = pair(LEN);
    let mut sges = Vec::new();
    let mut wrs = chain(&p, 1, LEN, false, &mut sges);
    let mut wcs = [Wc::default(); 4];
    let mut g = c.benchmark_group("write_1MiB");
    g.throughput(Throughput::Bytes(LEN as u64));
    g.measurement_time(Duration::from_secs(4));
    g.bench_function("rdma_write", |b| {
        b.iter(|| round(&p, &mut wrs, 1, &mut wcs))
    });
    let src = vec![7u8; LEN];
    let mut dst = vec![0u8; LEN];
    g.bench_function("memcpy", |b| {
        b.iter(|| {
            dst.copy_from_slice(black_box(&src));
            black_box(&mut dst);
        })
    });
    g.finish();
}

criterion_group!(benches, small_writes, large_writes);
criterion_main!(benches);
