//! round_trip: the engine's data path in a fixed loop, to count its instructions.
//!
//! Posts one RDMA write at a time on a 4-QP DQPLB virtual QP over the no-op provider of
//! `vqp-sim` and polls until its completion is reported: the loop of the `A` and `B`
//! benches, without criterion around it. Run it under callgrind for two iteration
//! counts; the difference of the totals divided by the difference of the counts is the
//! cost of one request, start-up excluded.
//!
//! ```text
//! cargo build --release --example round_trip
//! valgrind --tool=callgrind target/release/examples/round_trip 4096 fifo last 10000
//! valgrind --tool=callgrind target/release/examples/round_trip 4096 fifo last 20000
//! ```
//!
//! Arguments: request length in bytes (fragments of 64 KiB), `fifo` or `shuffled`
//! completion order, `last` (last-of-chain) or `every` (every WQE) signaling, and the
//! number of requests.

use std::hint::black_box;
use std::process::ExitCode;

use vqp_core::split::SplitPolicy;
use vqp_core::{Config, Keys, Mode, Opcode, SendWr, Signaling, VirtualCq, VirtualQp, Wc};
use vqp_sim::noop::{NoopConfig, NoopCq, NoopOrder, NoopQp, RecvMode};

type Vqp = VirtualQp<NoopQp, 4, 64, 256, 512>;
type Vcq = VirtualCq<NoopCq, 1, 32>;

const USAGE: &str = "usage: round_trip <len> <fifo|shuffled> <last|every> <requests>";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [len, order, signaling, count] = args.as_slice() else {
        eprintln!("{USAGE}");
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
    let cq = NoopCq::new(NoopConfig {
        capacity: 8192,
        recv_capacity: 4096,
        order,
        recv_mode: RecvMode::Complete,
    });
    let data: Vec<(NoopQp, u8)> = (0..4).map(|i| (cq.create_qp(100 + i), 0)).collect();
    let cfg = Config {
        split: SplitPolicy::new(64 << 10),
        max_outstanding: 64,
        recv_depth: 64,
        signaling,
        ..Config::new(Mode::Dqplb)
    };
    let mut vqp = Vqp::new(cfg, data, None).expect("a valid set-up");
    let mut vcq = Vcq::new();
    vcq.add_cq(cq, 0, 8192).expect("one CQ");
    vcq.attach(&mut vqp).expect("a large enough CQ");
    let wr = SendWr::new(
        7,
        Opcode::RDMA_WRITE,
        0x10_0000,
        len,
        0x20_0000,
        Keys::single(1, 2),
    );
    let mut out = [Wc::EMPTY; 32];
    for _ in 0..count {
        vqp.post_send(black_box(&wr)).expect("accepted");
        loop {
            let n = vcq.poll(&mut [&mut vqp], &mut out).expect("no-op polls");
            if n > 0 {
                black_box(&out[..n]);
                break;
            }
        }
    }
    ExitCode::SUCCESS
}
