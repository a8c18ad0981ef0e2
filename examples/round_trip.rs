//! round_trip: the engine's data path in a fixed loop, to count its instructions.
//!
//! Posts one RDMA write at a time on a 4-QP DQPLB virtual QP over the no-op provider of
//! `vqp-sim` and polls until its completion is reported: the loop of the `A` and `B`
//! benches, from the same file (`benches/support/rig.rs`), without criterion around it.
//! Run it under callgrind for two iteration counts; the difference of the totals divided
//! by the difference of the counts is the cost of one request, start-up excluded.
//!
//! ```text
//! cargo build --release --example round_trip
//! valgrind --tool=callgrind target/release/examples/round_trip 4096 fifo last 10000
//! valgrind --tool=callgrind target/release/examples/round_trip 4096 fifo last 20000
//! ```
//!
//! Arguments: request length in bytes (fragments of 64 KiB), `fifo` or `shuffled`
//! completion order, `last` (last-of-chain) or `every` (every WQE) signaling, the
//! number of requests, and optionally how many are in flight at once (default 1; with
//! 32, the loop of the `A post + completion, 32 in flight` bench: post 32, then poll
//! their 32 completions; the number of requests is rounded down to a multiple of it).

use std::hint::black_box;
use std::process::ExitCode;

use vqp_core::Signaling;
use vqp_sim::noop::{NoopOrder, RecvMode};

/// The benches' rig and loop, the same file.
#[allow(dead_code)]
#[path = "../benches/support/rig.rs"]
mod rig;

const USAGE: &str =
    "usage: round_trip <len> <fifo|shuffled> <last|every> <requests> [in-flight, 1 to 32]";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (len, order, signaling, count, depth) = match args.as_slice() {
        [l, o, s, c] => (l, o, s, c, "1"),
        [l, o, s, c, d] => (l, o, s, c, d.as_str()),
        _ => {
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    let Ok(depth @ 1..=32) = depth.parse::<u64>() else {
        eprintln!("{USAGE}: at most 32 requests in flight (the virtual CQ's batch)");
        return ExitCode::from(2);
    };
    let (Ok(len @ 1..), Ok(count)) = (len.parse::<u64>(), count.parse::<u64>()) else {
        eprintln!("{USAGE}: the length must be a positive number of bytes");
        return ExitCode::from(2);
    };
    let order = match order.as_str() {
        "fifo" => NoopOrder::Fifo,
        "shuffled" => NoopOrder::Shuffled { seed: 0x5eed },
        _ => {
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    let signaling = match signaling.as_str() {
        "last" => Signaling::LastOfChain,
        "every" => Signaling::Every,
        _ => {
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    let mut r = rig::rig(4, order, signaling, RecvMode::Complete);
    let wr = rig::write(len);
    if depth == 1 {
        for _ in 0..count {
            r.post_complete(black_box(&wr));
        }
    } else {
        for _ in 0..count / depth {
            for _ in 0..depth {
                r.vqp.post_send(black_box(&wr)).expect("accepted");
            }
            r.poll_until(depth as usize);
        }
    }
    ExitCode::SUCCESS
}
