//! The provider's own cost: small RDMA WRITEs in WQEs per second on one core, and
//! 1 MiB WRITEs in bytes per second next to a plain `memcpy` of the same size.
//!
//! The engine runs inline (`Progress::Inline`): the benchmark thread posts, and its
//! `poll_cq` executes and reaps, so everything happens on one core.
//!
//! `cargo bench -p vqp-softverbs --bench provider`

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use vqp_host::Wc;

#[path = "support/pair.rs"]
mod pair;

use pair::{chain, pair, round};

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
