//! The smallest in-process RDMA WRITE loop, for counting the provider's instructions
//! per WQE under callgrind: one RC QP on `soft0` writing 64-byte chunks to one on
//! `soft1` of the same process, the engine run inline by the loop's own `poll_cq`
//! (the shapes of `benches/provider.rs`'s `write_64B`, without criterion).
//!
//! `cargo run --release -p vqp-softverbs --example write_loop -- SHAPE ROUNDS`, SHAPE one
//! of `last` (chains of 32, the last signaled), `all` (chains of 32, each signaled),
//! `single` (one signaled WQE per post and per poll). Instructions per WQE: run it
//! under `valgrind --tool=callgrind` with two round counts and divide the difference
//! of the totals by the difference of the WQE counts (the set-up cancels out).

#[path = "../benches/support/pair.rs"]
mod pair;

use vqp_host::Wc;

use pair::{chain, pair, round};

const LEN: usize = 64;

fn main() {
    let mut args = std::env::args().skip(1);
    let shape = args.next().unwrap_or_else(|| "last".into());
    let rounds: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(1000);
    let (n, signal_all) = match shape.as_str() {
        "last" => (32, false),
        "all" => (32, true),
        "single" => (1, true),
        other => {
            eprintln!("write_loop: unknown shape {other:?} (last, all, single)");
            std::process::exit(2);
        }
    };
    let p = pair(1 << 16);
    let mut sges = Vec::new();
    let mut wrs = chain(&p, n, LEN, !signal_all, &mut sges);
    let expect = if signal_all { n } else { 1 };
    let mut wcs = [Wc::default(); 64];
    for _ in 0..rounds {
        round(&p, &mut wrs, expect, &mut wcs);
    }
    println!("{shape}: {rounds} rounds of {n} WQEs");
}
