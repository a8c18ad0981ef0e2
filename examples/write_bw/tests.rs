//! The server (on softverbs' `soft1`, in a thread) against clients that misbehave:
//! each test plays a client over TCP — by hand, or with the real set-up on `soft0`
//! up to the point where it stops behaving — with short deadlines.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use vqp_core::Opcode;

use crate::args::{Limit, Params};
use crate::control::{DONE, END, FLUSHED, LATER, POSTED, QP_FAILED};
use crate::device::{self, Device};
use crate::run::{self, Link};
use crate::server::{max_reads, Verified};
use crate::session::serve;
use crate::wire::Wire;
use crate::{spawn, Fail, Limits};

/// The server's deadline in these tests.
const SHORT: Duration = Duration::from_millis(300);

type Served = JoinHandle<Result<(Params, Verified), Fail>>;

fn soft(name: &str) -> Device {
    let (verbs, _) = device::load_soft();
    device::open(&verbs, name, 1, None).unwrap()
}

/// A server for one client, on a loopback port.
fn server(limits: Limits) -> (SocketAddr, Served) {
    let dev = soft("soft1");
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let h = spawn("server", move || {
        serve(vec![dev], &l, None, Some(Duration::from_secs(5)), &limits)
    })
    .unwrap();
    (addr, h)
}

fn limits(timeout: Duration) -> Limits {
    Limits {
        timeout,
        max_buffer: crate::args::DEFAULT_MAX_BUFFER,
    }
}

/// The server's result, which must come within `within`.
fn outcome(h: Served, within: Duration) -> Result<(Params, Verified), Fail> {
    let until = Instant::now() + within;
    while !h.is_finished() {
        assert!(
            Instant::now() < until,
            "the server was still running after {within:?}"
        );
        thread::sleep(Duration::from_millis(10));
    }
    h.join().unwrap()
}

fn params(opcode: Opcode, limit: Limit) -> Params {
    Params {
        size: 4096,
        qps: 2,
        opcode,
        limit,
        ..Params::default()
    }
}

/// A client that does the whole set-up on `soft0`, up to the barrier's start (in a
/// thread with the stack the virtual QP's construction needs).
fn client(addr: SocketAddr, p: &Params) -> (Device, Link) {
    let p = *p;
    let set_up = spawn("client", move || {
        let dev = soft("soft0");
        let stream = TcpStream::connect(addr).unwrap();
        let mut wire = Wire::new(stream, "server", Duration::from_secs(5))?;
        wire.write_all(p.to_line().as_bytes(), "parameters")?;
        assert_eq!(wire.read_line("answer")?, "ok");
        let link = run::link(
            std::slice::from_ref(&dev),
            &p,
            run::Stripe::ROUND_ROBIN,
            wire,
            (p.client_buffer(), p.server_buffer()),
            1,
            run::Cards::Wire,
        )?;
        Ok((dev, link))
    })
    .unwrap();
    crate::join(set_up).unwrap()
}

/// Writes `bytes` one at a time, `every` apart, until the peer goes or they run out.
fn trickle(mut s: TcpStream, bytes: Vec<u8>, every: Duration) -> JoinHandle<()> {
    thread::spawn(move || {
        for b in bytes {
            if s.write_all(&[b]).is_err() {
                return;
            }
            thread::sleep(every);
        }
    })
}

#[test]
fn a_trickled_parameter_line_meets_one_deadline() {
    let (addr, h) = server(limits(SHORT));
    let s = TcpStream::connect(addr).unwrap();
    // Each byte is 50 ms after the last, far inside the timeout; the line would
    // take 2.5 s.
    let t = trickle(
        s,
        b"write_bw/2 size=4096 qps=2 and so on and so forth".to_vec(),
        Duration::from_millis(50),
    );
    let start = Instant::now();
    let f = outcome(h, Duration::from_secs(2)).unwrap_err();
    assert!(start.elapsed() < Duration::from_millis(1500));
    assert!(
        f.msg
            .starts_with("no complete parameters from the client within 0.3 s ("),
        "{}",
        f.msg
    );
    t.join().unwrap();
}

#[test]
fn a_trickled_card_meets_one_deadline() {
    let (addr, h) = server(limits(SHORT));
    let mut s = TcpStream::connect(addr).unwrap();
    let p = params(Opcode::RDMA_WRITE_WITH_IMM, Limit::Iters(10));
    s.write_all(p.to_line().as_bytes()).unwrap();
    let mut ok = [0u8; 3];
    s.read_exact(&mut ok).unwrap();
    assert_eq!(&ok, b"ok\n");
    let mut frame = 412u32.to_be_bytes().to_vec();
    frame.extend([0u8; 412]);
    let t = trickle(s, frame, Duration::from_millis(20));
    let f = outcome(h, Duration::from_secs(2)).unwrap_err();
    assert!(
        f.msg
            .starts_with("no complete endpoint card from the client within 0.3 s ("),
        "{}",
        f.msg
    );
    assert!(f.msg.ends_with(" of 412 bytes arrived)"), "{}", f.msg);
    t.join().unwrap();
}

#[test]
fn a_client_that_stalls_after_connecting_is_given_up() {
    let (addr, h) = server(limits(SHORT));
    let p = params(Opcode::RDMA_WRITE_WITH_IMM, Limit::Iters(1000));
    let (_dev, mut link) = client(addr, &p);
    link.wire.barrier().unwrap();
    // Connected, and then nothing: no message, no frame, no close.
    let f = outcome(h, Duration::from_secs(3)).unwrap_err();
    assert_eq!(
        f.msg,
        "no progress from the client for 0.3 s (0 messages verified)"
    );
    drop(link);
}

#[test]
fn a_reader_that_stalls_is_given_up() {
    let (addr, h) = server(limits(SHORT));
    let p = params(Opcode::RDMA_READ, Limit::Iters(1000));
    let (_dev, mut link) = client(addr, &p);
    link.wire.barrier().unwrap();
    let f = outcome(h, Duration::from_secs(3)).unwrap_err();
    assert_eq!(
        f.msg,
        "no progress from the client for 0.3 s (the client reported 0 messages read)"
    );
    drop(link);
}

#[test]
fn a_buffer_above_the_bound_is_refused_before_anything_is_built() {
    let (addr, h) = server(limits(SHORT));
    let mut s = TcpStream::connect(addr).unwrap();
    let p = Params {
        size: 1 << 30,
        ..params(Opcode::RDMA_READ, Limit::Iters(10))
    };
    s.write_all(p.to_line().as_bytes()).unwrap();
    let mut reply = String::new();
    s.read_to_string(&mut reply).unwrap();
    assert_eq!(
        reply,
        "error --size 1 GiB --opcode read: the server would register 3 GiB (3 messages), above its --max-buffer of 1 GiB\n"
    );
    let f = outcome(h, Duration::from_secs(2)).unwrap_err();
    assert!(f.msg.starts_with("refused the client's run: "), "{}", f.msg);
    assert_eq!(f.code, 2);
}

#[test]
fn a_buffer_at_the_bound_is_served() {
    let p = params(Opcode::RDMA_READ, Limit::Iters(10));
    let (addr, h) = server(Limits {
        timeout: Duration::from_secs(5),
        max_buffer: p.server_buffer(),
    });
    let (_dev, mut link) = client(addr, &p);
    link.wire.barrier().unwrap();
    let mut ctl = link.wire.into_control().unwrap();
    ctl.send(END, 10).unwrap();
    let (_, v) = outcome(h, Duration::from_secs(5)).unwrap();
    assert_eq!(v.messages, 10);
}

/// Sets up a run as `p`, sends `frames` and returns the server's result.
fn claim(p: &Params, frames: &[(u8, u64)]) -> Result<(Params, Verified), Fail> {
    let (addr, h) = server(limits(Duration::from_secs(5)));
    let (_dev, mut link) = client(addr, p);
    link.wire.barrier().unwrap();
    let mut ctl = link.wire.into_control().unwrap();
    for &(tag, n) in frames {
        ctl.send(tag, n).unwrap();
    }
    let r = outcome(h, Duration::from_secs(5));
    drop(ctl);
    r
}

#[test]
fn a_reader_s_impossible_end_count_is_refused() {
    let p = params(Opcode::RDMA_READ, Limit::Iters(200));
    let f = claim(&p, &[(END, u64::MAX)]).unwrap_err();
    assert_eq!(
        f.msg,
        "the client's E frame claims 18446744073709551615 messages, but the run is for 200; refusing the run"
    );
    assert_eq!(f.code, 2);
    // Fewer than asked for, with no Ctrl-C and no failure, is no complete run either.
    let f = claim(&p, &[(END, 199)]).unwrap_err();
    assert!(f.msg.contains("ended after 199 of its 200"), "{}", f.msg);
    // A count going backwards.
    let f = claim(&p, &[(DONE, 150), (END, 120)]).unwrap_err();
    assert!(f.msg.contains("fewer than the 150"), "{}", f.msg);
    // Timed: no count above what a device could read in the time.
    let timed = params(Opcode::RDMA_READ, Limit::Time(Duration::from_secs(1)));
    let f = claim(&timed, &[(END, u64::MAX)]).unwrap_err();
    assert!(
        f.msg.contains("more than any RDMA device reads in"),
        "{}",
        f.msg
    );
    assert_eq!(f.code, 2);
    // The count the run asked for is believed: the server cannot see reads.
    let (_, v) = claim(&p, &[(DONE, 100), (END, 200)]).unwrap();
    assert_eq!(v.messages, 200);
}

#[test]
fn a_writer_claiming_beyond_its_credit_is_refused() {
    // 4 KiB messages: 128 slots, nothing credited yet.
    let p = params(Opcode::RDMA_WRITE, Limit::Time(Duration::from_secs(1)));
    let f = claim(&p, &[(DONE, 10_000)]).unwrap_err();
    assert_eq!(
        f.msg,
        "the client's D frame claims 10000 messages, but with 0 credited it can have sent at most 128; refusing the run"
    );
    assert_eq!(f.code, 2);
    let p = params(Opcode::RDMA_WRITE_WITH_IMM, Limit::Iters(1000));
    let f = claim(&p, &[(END, 1000)]).unwrap_err();
    assert!(f.msg.contains("at most 128"), "{}", f.msg);
}

#[test]
fn the_read_bound_is_far_above_any_device_and_grows_with_time() {
    // 64-byte reads: a billion a second; 1 MiB reads: a terabyte a second; both
    // over the time given plus 10 ms (1.01 s × 10^12 / 2^20 = 963,211.06).
    let s = Duration::from_secs(1);
    assert_eq!(max_reads(64, s), 1_010_000_000);
    assert_eq!(max_reads(1 << 20, s), 963_212);
    assert!(max_reads(64, 2 * s) > max_reads(64, s));
    // Even at the start, a few batches of slots fit.
    assert!(max_reads(1 << 30, Duration::ZERO) >= 1);
}

#[test]
fn a_run_without_messages_never_passes() {
    let f = crate::nothing_is_no_pass(0).unwrap_err();
    assert_eq!(
        (f.code, f.msg.as_str()),
        (
            1,
            "data check: no message completed, so nothing was verified"
        )
    );
    assert!(crate::nothing_is_no_pass(1).is_ok());
    // Nor does the server take a timed run's end without a message.
    let timed = params(
        Opcode::RDMA_WRITE_WITH_IMM,
        Limit::Time(Duration::from_secs(1)),
    );
    let f = claim(&timed, &[(END, 0)]).unwrap_err();
    assert_eq!(
        f.msg,
        "the client ended its timed run without a message; refusing the run"
    );
}

#[test]
fn a_failed_run_s_count_is_told_as_the_client_sent_it_and_must_add_up() {
    // A reader's count (the server checks none of it): said back as it came.
    let p = params(Opcode::RDMA_READ, Limit::Iters(200));
    let f = claim(
        &p,
        &[(POSTED, 60), (LATER, 7), (FLUSHED, 13), (QP_FAILED, 40)],
    )
    .unwrap_err();
    assert_eq!(
        f.msg,
        "the client's virtual QP failed after it read 40 messages (of 60 posted, 7 completed after the first failure and 13 were flushed)"
    );
    // More counted than posted.
    let f = claim(
        &p,
        &[(POSTED, 60), (LATER, 30), (FLUSHED, 13), (QP_FAILED, 40)],
    )
    .unwrap_err();
    assert!(f.msg.contains("does not add up"), "{}", f.msg);
    assert!(!f.peer);
    // Counts near 2^64 do not wrap into a sum that looks right.
    let f = claim(
        &p,
        &[
            (POSTED, 60),
            (LATER, u64::MAX),
            (FLUSHED, 2),
            (QP_FAILED, 40),
        ],
    )
    .unwrap_err();
    assert!(f.msg.contains("does not add up"), "{}", f.msg);
    // A writer cannot have posted beyond its credit.
    let w = params(Opcode::RDMA_WRITE_WITH_IMM, Limit::Iters(1000));
    let f = claim(&w, &[(POSTED, 500), (QP_FAILED, 0)]).unwrap_err();
    assert!(
        f.msg.contains("the client's P frame claims 500"),
        "{}",
        f.msg
    );
}
