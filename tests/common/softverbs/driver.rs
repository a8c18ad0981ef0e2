//! The driver that posts a list of requests on a pair and collects every completion.

use std::time::{Duration, Instant};

use vqp_core::{Keys, Opcode, PostRecvError, PostSendError, RecvWr, SendWr, Wc};

use super::Pair;

/// One request: `op` of `len` bytes at offset `off` of the write area (WRITE, WRITE
/// WITH_IMM: A → B) or of the read area (READ: B → A).
#[derive(Clone, Copy, Debug)]
pub struct Req {
    pub op: Opcode,
    pub len: u64,
    pub off: u64,
    /// Keys to use instead of the pair's.
    pub keys: Option<Keys>,
}

impl Req {
    /// The immediate of request `i` (network order).
    pub fn imm(i: usize) -> u32 {
        (0x5100_0000 | i as u32).to_be()
    }
}

/// Requests of the given ops and sizes laid out one after the other in their areas,
/// 13 untouched bytes apart (so a write past a request's end shows); returns them and
/// the (write, read) area lengths they need.
pub fn layout(ops: &[(Opcode, u64)]) -> (Vec<Req>, u64, u64) {
    let (mut w, mut r) = (0u64, 0u64);
    let reqs = ops
        .iter()
        .map(|&(op, len)| {
            let area = if op == Opcode::RDMA_READ {
                &mut r
            } else {
                &mut w
            };
            let off = *area;
            *area += len + 13;
            Req {
                op,
                len,
                off,
                keys: None,
            }
        })
        .collect();
    (reqs, w, r.max(1))
}

/// What a run reported.
#[derive(Debug, Default)]
pub struct Outcome {
    /// Index after the last request the sender accepted (from 0, including those of
    /// earlier runs).
    pub posted: usize,
    /// Indices of the requests a notification receive was posted for, in order.
    pub recv_for: Vec<usize>,
    /// The sender's completions, in the order reported.
    pub sends: Vec<Wc>,
    /// The receiver's completions, in the order reported.
    pub recvs: Vec<Wc>,
}

/// How long a receiver that is owed receives may stay quiet, once its sender is done,
/// before a run that tolerates it stops waiting. Only how many receives end in success
/// rather than in the shutdown's flush depends on it, and the checks accept both.
pub const SILENCE: Duration = Duration::from_millis(200);

/// How long a run may take before it is declared hung.
pub const DEADLINE: Duration = Duration::from_secs(40);

/// Posts `reqs` in order on A (wr_id = index), each WRITE_WITH_IMM preceded by a
/// notification receive on B (wr_id = index), retrying on backpressure while polling
/// both sides; stops posting when the virtual QP refuses as failed. Returns once every
/// posted request is reported on A and either every receive is reported on B or, with
/// `tolerate_silence`, B has reported nothing for [`SILENCE`] (a failed sender
/// leaves receives that only a shutdown of B ends: see [`shut_down_receiver`]).
/// Panics, with what it saw, if nothing ends it within [`DEADLINE`].
pub fn run(p: &mut Pair, reqs: &[Req], tolerate_silence: bool) -> Outcome {
    run_from(p, reqs, 0, tolerate_silence)
}

/// [`run`] from request `first` on (the earlier ones were run before): `posted`
/// counts from `first`, the completions are those of this run only.
pub fn run_from(p: &mut Pair, reqs: &[Req], first: usize, tolerate_silence: bool) -> Outcome {
    let mut o = Outcome {
        posted: first,
        ..Outcome::default()
    };
    let base_keys = p.keys();
    let deadline = Instant::now() + DEADLINE;
    let mut refused = false;
    let mut last_recv = Instant::now();
    loop {
        while o.posted < reqs.len() && !refused {
            let i = o.posted;
            let r = reqs[i];
            let (local, remote) = if r.op == Opcode::RDMA_READ {
                (p.a.addr(p.write_len + r.off), p.b.addr(p.write_len + r.off))
            } else {
                (p.a.addr(r.off), p.b.addr(r.off))
            };
            let mut wr = SendWr::new(
                i as u64,
                r.op,
                local,
                r.len,
                remote,
                r.keys.unwrap_or(base_keys),
            );
            if r.op == Opcode::RDMA_WRITE_WITH_IMM {
                wr = wr.imm(Req::imm(i));
                if o.recv_for.last() != Some(&i) {
                    match p.b.conn.vqp.post_recv(&RecvWr::notification(i as u64)) {
                        Ok(()) => o.recv_for.push(i),
                        Err(PostRecvError::Full) => break,
                        Err(e) => panic!("receive {i} refused: {e}"),
                    }
                }
            }
            match p.a.conn.vqp.post_send(&wr) {
                Ok(()) => o.posted += 1,
                Err(PostSendError::Full) => break,
                Err(PostSendError::Failed(_)) => refused = true,
                Err(e) => panic!("request {i} refused: {e}"),
            }
        }
        let before = o.recvs.len();
        p.a.poll(&mut o.sends);
        p.b.poll(&mut o.recvs);
        if o.recvs.len() != before {
            last_recv = Instant::now();
        }
        let sender_done = (o.posted == reqs.len() || refused) && o.sends.len() >= o.posted - first;
        if sender_done {
            if o.recvs.len() >= o.recv_for.len() {
                return o;
            }
            if tolerate_silence && last_recv.elapsed() > SILENCE {
                return o;
            }
        }
        assert!(
            Instant::now() < deadline,
            "hung: {} of {} requests posted, {} sends and {} of {} receives reported; \
             sender failure {:?}, receiver failure {:?}",
            o.posted,
            reqs.len(),
            o.sends.len(),
            o.recvs.len(),
            o.recv_for.len(),
            p.a.conn.vqp.failure(),
            p.b.conn.vqp.failure(),
        );
    }
}

/// Shuts B's virtual QP down and polls until every receive it holds is reported
/// (appended to `o.recvs`), within [`DEADLINE`].
pub fn shut_down_receiver(p: &mut Pair, o: &mut Outcome) {
    p.b.conn.vqp.shut_down();
    let deadline = Instant::now() + DEADLINE;
    while o.recvs.len() < o.recv_for.len() {
        p.b.poll(&mut o.recvs);
        assert!(
            Instant::now() < deadline,
            "receiver shutdown hung: {} of {} receives reported",
            o.recvs.len(),
            o.recv_for.len()
        );
    }
}
