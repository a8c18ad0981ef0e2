//! lat: ping-pong latency over a virtual QP, in the spirit of perftest's `ib_write_lat`.
//!
//! Two endpoints run in this process over the software provider (`soft0` ↔ `soft1`).
//! Side A (the client) does an RDMA_WRITE_WITH_IMM of `--size` bytes to side B (the
//! server); B, on the notification receive's completion, writes the same size back;
//! A measures the round trip. Like `ib_write_lat`, the figures are **half the round
//! trip**.
//!
//! By default each side's virtual QP and virtual CQ are owned by a [`PollThread`]
//! pinned to a core (`--client-core`, `--server-core`), and each side's application
//! thread, on the same core or on its own (`--client-app-core`, `--server-app-core`),
//! talks to it through a [`Handle`] (a request ring in, an event ring out). Two threads
//! that spin (`--idle spin`, or `--direct`) are never placed on one core: refused.
//! With `--direct` the application threads own the virtual QP and poll the virtual CQ
//! themselves, pinned to the same cores: the difference is what the rings and the
//! hand-off between threads cost.
//!
//! The provider is `libvqp_softverbs.so` opened with the host's `dlopen` loader when
//! cargo built it next to this example, else the provider linked into this binary
//! (`vqp_softverbs::verbs_table()`); the output says which. Softverbs executes work
//! on the threads that poll its CQs, so the figures are the library's and the
//! provider's software cost, not a fabric's.
//!
//! ```text
//! cargo run --release --example lat -- --size 8 --iters 10000
//! cargo run --release --example lat -- --size 1048576 --qps 4 --mode spray --direct
//! ```

mod args;
mod pingpong;
mod side;
/// The byte-count parser `write_bw` uses, so that both take `4K`, `1M`, `1G`.
#[path = "../write_bw/size.rs"]
mod size;
mod threads;

use std::process::ExitCode;
use std::time::Duration;

use vqp_host::{Connected, Endpoint, Stack, VerbsCq, VerbsQp};

use args::{idle_name, mode_name, parse, Args, Wait, USAGE};
use pingpong::Plan;
use side::{arrived, connect, load_verbs, write, Buffers};
use threads::{run_direct, run_polled};

/// Data QPs at most (the virtual QP type's `N`).
const MAX_QPS: usize = 16;
/// Send WQEs per data QP (`D`) and receives kept posted per data QP.
const DEPTH: u32 = 16;
type Ep = Endpoint<MAX_QPS, 16, 256, 512, 1, 32>;
type Side = Connected<MAX_QPS, 16, 256, 512, 1, 32>;
type SideStack = Stack<VerbsQp, VerbsCq, MAX_QPS, 16, 256, 512, 1, 32>;
/// Capacity of each handle's request and event ring.
const RING: usize = 16;
/// Largest message: two buffers of this size are registered per side.
const MAX_SIZE: u64 = 256 << 20;
/// A wait for one completion longer than this is reported as a stall.
const STALL: Duration = Duration::from_secs(10);
/// Notification receives the server keeps posted ahead of the pings.
const RECV_AHEAD: u64 = 8;

fn run(a: &Args) -> Result<(), String> {
    let (verbs, provider) = load_verbs();
    let [(side_a, buf_a), (side_b, buf_b)] = connect(&verbs, a)?;
    let total = a.warmup + a.iters;
    let plan = |own: &Buffers, peer: &Buffers| Plan {
        wr: write(own, peer),
        total,
        warmup: a.warmup,
        wait: if a.direct { Wait::Spin } else { a.idle },
    };
    let plans = [plan(&buf_a, &buf_b), plan(&buf_b, &buf_a)];
    let hist = if a.direct {
        run_direct(a, plans, [side_a, side_b])?
    } else {
        run_polled(a, plans, [side_a, side_b])?
    };
    let checked = arrived(&buf_a, &buf_b)? && arrived(&buf_b, &buf_a)?;
    if !checked {
        return Err("data check FAILED: a destination differs from its source".into());
    }

    // Half round trips, in microseconds.
    let us = |ns: u64| ns as f64 / 2000.0;
    let q = |p: f64| us(hist.value_at_quantile(p));
    let (min, p50, p99, p999, max) = (us(hist.min()), q(0.5), q(0.99), q(0.999), us(hist.max()));
    let avg = hist.mean() / 2000.0;
    let frags = if a.qps > 1 {
        a.size.div_ceil(u64::from(a.max_frag))
    } else {
        1
    };
    let path = if a.direct { "direct" } else { "poll threads" };
    let mode = mode_name(a.mode);
    if a.json {
        println!(
            "{{\"bytes\":{},\"iterations\":{},\"warmup\":{},\"t_min_us\":{min:.2},\"t_p50_us\":{p50:.2},\"t_p99_us\":{p99:.2},\"t_p999_us\":{p999:.2},\"t_max_us\":{max:.2},\"t_avg_us\":{avg:.2},\"qps\":{},\"mode\":\"{mode}\",\"max_frag\":{},\"fragments\":{frags},\"path\":\"{path}\",\"idle\":\"{}\",\"provider\":\"{}\",\"data_check\":\"passed\"}}",
            a.size,
            hist.len(),
            a.warmup,
            a.qps,
            a.max_frag,
            idle_name(if a.direct { Wait::Spin } else { a.idle }),
            provider.replace('\\', "\\\\").replace('"', "\\\"")
        );
        return Ok(());
    }
    let line = "-".repeat(112);
    println!("{line}");
    println!(" vqp lat: RDMA_WRITE_WITH_IMM ping-pong, {} data QP(s), {mode}, {frags} fragment(s) of at most {} B per message", a.qps, a.max_frag);
    println!(
        " path: {path} (client core {}, server core {}{})",
        a.client_core,
        a.server_core,
        if a.direct {
            String::new()
        } else {
            format!(
                ", application cores {} and {}, idle {}",
                a.client_app_core.unwrap_or(a.client_core),
                a.server_app_core.unwrap_or(a.server_core),
                idle_name(a.idle)
            )
        }
    );
    println!(" provider: {provider}");
    println!(" times are half the round trip, as ib_write_lat reports them");
    println!("{line}");
    println!(
        " {:<10} {:<12}{:>14}{:>14}{:>14}{:>15}{:>14}{:>14}",
        "#bytes",
        "#iterations",
        "t_min[usec]",
        "t_p50[usec]",
        "t_p99[usec]",
        "t_p99.9[usec]",
        "t_max[usec]",
        "t_avg[usec]"
    );
    println!(
        " {:<10} {:<12}{min:>14.2}{p50:>14.2}{p99:>14.2}{p999:>15.2}{max:>14.2}{avg:>14.2}",
        a.size,
        hist.len()
    );
    println!("{line}");
    println!(
        " data check: the last message of each direction ({} bytes) verified: passed",
        a.size
    );
    Ok(())
}

fn main() -> ExitCode {
    let args = match parse() {
        Ok(Some(a)) => a,
        Ok(None) => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("lat: {e}");
            return ExitCode::from(2);
        }
    };
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("lat: {e}");
            ExitCode::from(1)
        }
    }
}
