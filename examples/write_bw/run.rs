//! The two sides of a run: connecting the virtual QPs, then the sender's loop (the
//! client posts every message) and the receiver's loop (the server checks what it is
//! told has landed).
//!
//! Buffers hold `slots` messages (`Params::slots`); message i uses slot i mod slots.
//! - write / write_imm: the client fills its slot with the pattern of i just before
//!   posting and writes it to the same slot on the server. The server checks a slot
//!   when it learns message i landed — write_imm: its notification completion; write:
//!   a `D` frame from the client saying the write completed (an RC write completes
//!   at the requester only once the responder has placed it) — and returns credits
//!   (`V` frames); the client never has more than `slots` messages unverified, so no
//!   slot is overwritten before it was checked.
//! - read: the server fills `slots + 1` source slots once (source slot k with the
//!   pattern of k); message i reads source slot i mod (slots + 1) into the client's
//!   slot i mod slots, and the client checks it when the read completes. The two
//!   slot counts are coprime, so a read that did not land leaves data of another key
//!   in the slot and fails the check.

use std::net::TcpStream;
use std::time::{Duration, Instant};

use vqp_core::split::SplitPolicy;
use vqp_core::{Config, Keys, Opcode, PostRecvError, PostSendError, RecvWr, SendWr, Wc};
use vqp_core::{WcOpcode, WcStatus};
use vqp_host::{exchange, AccessFlags, Connected, Endpoint, MemoryRegion, Settings};

use crate::args::Params;
use crate::data::{check, fill, slot, slot_addr, slot_mut};
use crate::device::Device;
use crate::report::{Measured, Progress};
use crate::wire::{self, Control, Remote, DONE, END, FAILED, STOP, VERIFIED};
use crate::{sigint, Fail};

/// Data QPs at most, WQEs per QP, requests in flight, DQPLB window, poll batch.
type Ep = Endpoint<16, 64, 1024, 2048, 32>;
type Conn = Connected<16, 64, 1024, 2048, 32>;
/// WQEs in flight per physical QP and receives kept posted per QP (the type's `D`).
pub const DEPTH: u32 = 64;

/// One side, connected to its peer.
pub struct Link {
    /// Boxed: the virtual QP's fixed-size state is some hundreds of KB.
    conn: Box<Conn>,
    mr: MemoryRegion,
    peer: Remote,
    stream: TcpStream,
}

fn host_fail(what: &str) -> impl FnOnce(vqp_host::Error) -> Fail + '_ {
    move |e| match e {
        vqp_host::Error::Exchange { .. } => Fail::peer(format!("{what}: {e}")),
        e => Fail::bad(format!("{what}: {e}")),
    }
}

/// Builds the endpoint on `dev`, swaps cards with the peer over `stream`, connects
/// the QPs, registers a buffer of `buf_len` bytes and swaps buffer descriptions.
pub fn link(
    dev: &Device,
    p: &Params,
    mut stream: TcpStream,
    buf_len: u64,
    qp_num: u32,
) -> Result<Link, Fail> {
    let cfg = Config {
        split: SplitPolicy::new(p.max_frag),
        max_outstanding: DEPTH,
        recv_depth: DEPTH,
        qp_num,
        ..Config::new(p.mode)
    };
    let mut settings = Settings::new(cfg, p.qps);
    settings.port = dev.ib_port;
    settings.gid_index = dev.gid_index;
    let ep = Ep::create(&dev.pd, &settings, None).map_err(host_fail(&dev.name))?;
    let card = exchange::exchange(&mut stream, &ep.card()).map_err(host_fail("card exchange"))?;
    let conn = Box::new(ep.connect(&card).map_err(host_fail(&dev.name))?);
    let len = usize::try_from(buf_len)
        .map_err(|_| Fail::bad(format!("a {buf_len}-byte buffer does not fit this machine")))?;
    let mr = dev
        .pd
        .register_buffer(len, AccessFlags::ALL_REMOTE)
        .map_err(|e| {
            Fail::bad(format!(
                "cannot register {buf_len} bytes on {}: {e}",
                dev.name
            ))
        })?;
    let mine = Remote {
        addr: mr.addr(),
        len: buf_len,
        rkey: mr.rkey(),
    };
    let peer = wire::swap_buffers(&mut stream, mine)?;
    Ok(Link {
        conn,
        mr,
        peer,
        stream,
    })
}

/// What the sender was asked to do.
pub struct Plan {
    pub iters: u64,
    pub duration: Option<Duration>,
    pub progress: bool,
}

fn qp_failed(status: WcStatus, done: u64) -> Fail {
    Fail::peer(format!(
        "the virtual QP failed after {done} messages: {status} (a QP broke or the peer went away)"
    ))
}

/// Polls `conn`'s virtual CQ once into `out`; returns how many completions it wrote.
fn poll(conn: &mut Conn, out: &mut [Wc]) -> Result<usize, Fail> {
    conn.vcq
        .poll(&mut [&mut conn.vqp], out)
        .map_err(|e| Fail::bad(e.to_string()))
}

fn disconnected(f: Fail, done: u64) -> Fail {
    Fail {
        msg: format!("{} mid-run, after {done} messages", f.msg),
        ..f
    }
}

/// The client: posts `--size` messages with at most `slots` unverified, polls, and
/// measures. Returns the measurements once the server confirmed every message.
pub fn client(link: Link, p: &Params, plan: &Plan) -> Result<Measured, Fail> {
    let Link {
        mut conn,
        mut mr,
        peer,
        mut stream,
    } = link;
    let (size, slots) = (p.size, p.slots());
    let read = p.opcode == Opcode::RDMA_READ;
    let plain = p.opcode == Opcode::RDMA_WRITE;
    let remote_slots = if read { slots + 1 } else { slots };
    if peer.len < remote_slots * size {
        return Err(Fail::bad(
            "the server's buffer is smaller than this run needs",
        ));
    }
    exchange::barrier(&mut stream).map_err(host_fail("waiting for the server"))?;
    let mut ctl = Control::new(stream)?;
    let keys = Keys::single(mr.lkey(), peer.rkey);
    let (mut posted, mut completed, mut credit, mut sent_done) = (0u64, 0u64, 0u64, 0u64);
    let (mut stop, mut interrupted) = (false, false);
    let mut out = [Wc::EMPTY; 32];
    let start = Instant::now();
    let deadline = plan.duration.map(|d| start + d);
    let mut progress = Progress::new(start, size, plan.progress);
    let mut last_move = start;
    loop {
        while let Some((tag, n)) = ctl.recv().map_err(|f| disconnected(f, completed))? {
            match tag {
                VERIFIED => {
                    credit = credit.max(n);
                    last_move = Instant::now();
                }
                STOP => interrupted = true,
                FAILED => {
                    return Err(Fail::data(format!(
                        "data check FAILED on the server: message {n}"
                    )))
                }
                t => {
                    return Err(Fail::bad(format!(
                        "the server sent an unknown frame {t:#x}"
                    )))
                }
            }
        }
        interrupted |= sigint::interrupted();
        stop |= interrupted
            || match deadline {
                Some(d) => Instant::now() >= d,
                None => posted >= plan.iters,
            };
        let before = posted;
        let base = if read { completed } else { credit };
        let limit = match deadline {
            Some(_) => u64::MAX,
            None => plan.iters,
        };
        while !stop && posted < base + slots && posted < limit {
            let s = posted % slots;
            let remote = peer.addr + (posted % remote_slots) * size;
            if !read {
                // SAFETY: the slot's previous message (posted − slots) was completed
                // and verified (posted < credit + slots), and nothing else is posted
                // from it until this message is.
                fill(unsafe { slot_mut(&mut mr, s, size) }, p.seed, posted);
            }
            let wr = SendWr::new(
                posted,
                p.opcode,
                slot_addr(&mr, s, size),
                size,
                remote,
                keys,
            )
            .imm((posted as u32).to_be());
            match conn.vqp.post_send(&wr) {
                Ok(()) => posted += 1,
                Err(PostSendError::Full) => break,
                Err(PostSendError::Failed(st)) => return Err(qp_failed(st, completed)),
                Err(e) => {
                    return Err(Fail::bad(format!(
                        "the virtual QP refused message {posted}: {e}"
                    )))
                }
            }
        }
        let n = poll(&mut conn, &mut out)?;
        for wc in &out[..n] {
            if !wc.status.is_ok() {
                return Err(qp_failed(wc.status, completed));
            }
            if wc.wr_id != completed || wc.byte_len != size {
                return Err(Fail::bad(format!(
                    "completion of message {} ({} bytes) when {completed} was due",
                    wc.wr_id, wc.byte_len
                )));
            }
            if read {
                // SAFETY: the read into this slot completed, and the next read into it
                // is posted only after this check (posted < completed + slots).
                let got = unsafe { slot(&mr, completed % slots, size) };
                if let Some(at) = check(got, p.seed, completed % remote_slots) {
                    return Err(Fail::data(format!(
                        "data check FAILED on the client: message {completed}, byte {at}"
                    )));
                }
            }
            completed += 1;
            last_move = Instant::now();
        }
        if plain && completed > sent_done {
            ctl.send(DONE, completed)
                .map_err(|f| disconnected(f, completed))?;
            sent_done = completed;
        }
        ctl.flush().map_err(|f| disconnected(f, completed))?;
        if let Some(st) = conn.vqp.failure() {
            return Err(qp_failed(st, completed));
        }
        let now = Instant::now();
        // A message counts once it completed here and its receiver checked it.
        let delivered = if read {
            completed
        } else {
            completed.min(credit)
        };
        progress.tick(now, delivered);
        if stop && completed == posted {
            break;
        }
        if n == 0 && posted == before {
            // Nothing to do this round: let the other side (and, on softverbs, the
            // progress engine) have the core; a machine with fewer cores than busy
            // threads otherwise spends its time spinning.
            std::thread::yield_now();
        }
        if now.duration_since(last_move) > wire::TIMEOUT {
            return Err(Fail::peer(format!(
                "no progress for {:?} after {completed} messages ({} in flight, {} verified)",
                wire::TIMEOUT,
                posted - completed,
                credit
            )));
        }
    }
    ctl.send(END, posted)
        .map_err(|f| disconnected(f, completed))?;
    // Wait for the server to confirm (after checking) every message.
    let until = Instant::now() + wire::TIMEOUT;
    while credit < posted {
        match ctl.recv().map_err(|f| disconnected(f, completed))? {
            Some((VERIFIED, n)) => credit = credit.max(n),
            Some((FAILED, n)) => {
                return Err(Fail::data(format!(
                    "data check FAILED on the server: message {n}"
                )))
            }
            Some(_) => {}
            None if Instant::now() > until => {
                return Err(Fail::peer(format!(
                    "the server confirmed {credit} of {posted} messages, then went silent"
                )))
            }
            None => std::hint::spin_loop(),
        }
    }
    let elapsed = start.elapsed();
    let lanes = conn.vqp.data_qps();
    Ok(Measured {
        iters: completed,
        elapsed,
        peak: progress.peak(elapsed, completed),
        per_qp: (0..lanes)
            .map(|i| conn.vqp.lane_stats(i).map_or(0, |s| s.wqes))
            .collect(),
        notify: conn
            .vqp
            .notify_qp_num()
            .and_then(|_| conn.vqp.lane_stats(lanes))
            .map(|s| s.wqes),
        interrupted,
    })
}

/// What the server checked.
pub struct Verified {
    pub messages: u64,
    pub interrupted: bool,
}

/// The server: posts notification receives (write_imm), checks every message it is
/// told about, returns credits, until the client's `E` frame.
pub fn server(link: Link, p: &Params) -> Result<Verified, Fail> {
    let Link {
        mut conn,
        mut mr,
        peer,
        mut stream,
    } = link;
    let (size, slots) = (p.size, p.slots());
    let read = p.opcode == Opcode::RDMA_READ;
    let imm = p.opcode == Opcode::RDMA_WRITE_WITH_IMM;
    if peer.len < slots * size {
        return Err(Fail::bad(
            "the client's buffer is smaller than this run needs",
        ));
    }
    if read {
        for k in 0..=slots {
            // SAFETY: no work request exists yet (the client posts after the barrier).
            fill(unsafe { slot_mut(&mut mr, k, size) }, p.seed, k);
        }
    }
    exchange::barrier(&mut stream).map_err(host_fail("waiting for the client"))?;
    let mut ctl = Control::new(stream)?;
    let (mut verified, mut announced, mut recvs, mut sender_done) = (0u64, 0u64, 0u64, 0u64);
    let mut end = None;
    let (mut stop_sent, mut interrupted) = (false, false);
    let mut out = [Wc::EMPTY; 32];
    loop {
        // After `E` the client may close the connection at any time: read no further.
        while end.is_none() {
            let Some((tag, n)) = ctl.recv().map_err(|f| disconnected(f, verified))? else {
                break;
            };
            match tag {
                DONE => sender_done = sender_done.max(n),
                END => {
                    end = Some(n);
                    if !imm {
                        sender_done = sender_done.max(n);
                    }
                }
                t => {
                    return Err(Fail::bad(format!(
                        "the client sent an unknown frame {t:#x}"
                    )))
                }
            }
        }
        while imm && recvs < verified + slots {
            match conn.vqp.post_recv(&RecvWr::notification(recvs)) {
                Ok(()) => recvs += 1,
                Err(PostRecvError::Full) => break,
                Err(e) => {
                    return Err(Fail::peer(format!(
                        "receive refused after {verified} messages: {e}"
                    )))
                }
            }
        }
        let n = poll(&mut conn, &mut out)?;
        let announced_before = verified;
        let mut landed = if imm { verified } else { sender_done };
        for wc in &out[..n] {
            if !wc.status.is_ok() {
                return Err(qp_failed(wc.status, verified));
            }
            // (byte_len is not checked: a SPRAY notify is a zero-byte write.)
            if wc.opcode != WcOpcode::RECV_RDMA_WITH_IMM || wc.wr_id != landed {
                return Err(Fail::bad(format!(
                    "unexpected completion: receive {} when {landed} was due",
                    wc.wr_id
                )));
            }
            landed += 1;
        }
        while verified < landed && !read {
            // SAFETY: message `verified` has landed and the client writes this slot
            // again only after our credit for it (it keeps < slots unverified).
            let got = unsafe { slot(&mr, verified % slots, size) };
            if let Some(at) = check(got, p.seed, verified) {
                let _ = ctl.send(FAILED, verified);
                return Err(Fail::data(format!(
                    "data check FAILED on the server: message {verified}, byte {at}"
                )));
            }
            verified += 1;
        }
        if verified > announced {
            ctl.send(VERIFIED, verified)
                .map_err(|f| disconnected(f, verified))?;
            announced = verified;
        }
        interrupted |= sigint::interrupted();
        if interrupted && !stop_sent {
            ctl.send(STOP, 0).map_err(|f| disconnected(f, verified))?;
            stop_sent = true;
        }
        ctl.flush().map_err(|f| disconnected(f, verified))?;
        if let Some(st) = conn.vqp.failure() {
            return Err(qp_failed(st, verified));
        }
        if n == 0 && verified == announced_before {
            std::thread::yield_now();
        }
        match end {
            Some(n) if read => {
                ctl.send(VERIFIED, n)
                    .map_err(|f| disconnected(f, verified))?;
                verified = n;
                break;
            }
            Some(n) if verified >= n => break,
            _ => {}
        }
    }
    // Make sure the last credit left before this side closes the connection.
    let until = Instant::now() + wire::TIMEOUT;
    while !ctl.flushed() {
        ctl.flush().map_err(|f| disconnected(f, verified))?;
        if Instant::now() > until {
            return Err(Fail::peer("the client stopped reading"));
        }
        std::thread::sleep(Duration::from_micros(50));
    }
    Ok(Verified {
        messages: verified,
        interrupted,
    })
}
