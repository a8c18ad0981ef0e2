//! round_trip_host: the loop of `bench/round_trip.c` on vqp-host directly — post one
//! 4 KiB RDMA_WRITE on a 4-QP DQPLB virtual QP, poll until its completion, N times —
//! with the C API's capacities, over the verbs library `Verbs::load` finds
//! (`VQP_IBVERBS_PATH`: softverbs' cdylib). The difference between the two, under
//! callgrind or the clock, is what the C API adds. Prints the ns per request, of the
//! clock and of this thread's CPU time (which leaves out time other processes ran).
//!
//! usage: round_trip_host N

use std::hint::black_box;
use std::process::ExitCode;
use std::time::Instant;

use vqp_core::{Config, Keys, Mode, Opcode, SendWr, Wc};
use vqp_host::{AccessFlags, Context, Endpoint, Settings, Verbs};

/// The C API's instantiation (vqp-capi's crate docs).
type Ep = Endpoint<8, 128, 512, 1024, 4, 32>;

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("round_trip_host: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let n: u64 = std::env::args().nth(1).map_or(Ok(10_000), |a| a.parse())?;
    let verbs = Verbs::load()?;
    let (c0, c1) = (
        Context::open(&verbs, Some("soft0"))?,
        Context::open(&verbs, Some("soft1"))?,
    );
    let (p0, p1) = (c0.alloc_pd()?, c1.alloc_pd()?);
    let src = p0.register_buffer(4096, AccessFlags::LOCAL_WRITE)?;
    let dst = p1.register_buffer(4096, AccessFlags::ALL_REMOTE)?;
    let s = Settings::new(Config::new(Mode::Dqplb), 4);
    let a = Ep::create(&p0, &s, None)?;
    let b = Ep::create(&p1, &s, None)?;
    let (ca, cb) = (a.card(), b.card());
    let mut a = a.connect(&cb)?;
    let _b = b.connect(&ca)?;
    let wr = SendWr::new(
        7,
        Opcode::RDMA_WRITE,
        src.addr(),
        4096,
        dst.addr(),
        Keys::single(src.lkey(), dst.rkey()),
    );
    let mut out = [Wc::EMPTY; 32];
    let c = thread_cpu_ns();
    let t = Instant::now();
    for _ in 0..n {
        a.vqp.post_send(black_box(&wr))?;
        loop {
            let got = a
                .vcq
                .poll(&mut [&mut a.vqp], &mut out)
                .map_err(|e| format!("poll: errno {}", e.errno))?;
            if got > 0 {
                if !out[0].status.is_ok() {
                    return Err(format!("status {}", out[0].status).into());
                }
                black_box(&out[..got]);
                break;
            }
        }
    }
    let ns = t.elapsed().as_nanos() as f64 / n as f64;
    let cpu = (thread_cpu_ns() - c) as f64 / n as f64;
    println!(
        "round_trip (Rust, vqp-host): {n} requests, {ns:.1} ns per request ({cpu:.1} ns of the thread's CPU time)"
    );
    Ok(())
}

/// This thread's CPU time in nanoseconds (`CLOCK_THREAD_CPUTIME_ID`, as the C twin).
fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a writable timespec; the clock id is valid on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}
