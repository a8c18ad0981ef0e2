//! The execution engine: which QP runs next, and what running a WQE does.
//!
//! The rules are listed in the [module documentation](super). Each step is one of:
//! execute the head send WQE of a QP in `Rts`; count one RNR attempt for it; flush the
//! oldest outstanding WQE of a QP in `Error`.

use vqp_core::{Opcode, PhysWc, SendFlags, WcOpcode, WcStatus};

use super::cq::{CqEntry, Slot};
use super::mem::Access;
use super::qp::{QpState, SendEntry};
use super::{ReorderPolicy, State};

/// `ibv_qp_attr.rnr_retry` value meaning "retry forever".
const RNR_INFINITE: u8 = 7;

/// True for the opcodes that consume a receive at the responder.
fn needs_recv(op: Opcode) -> bool {
    matches!(
        op,
        Opcode::RDMA_WRITE_WITH_IMM | Opcode::SEND | Opcode::SEND_WITH_IMM
    )
}

fn is_atomic(op: Opcode) -> bool {
    matches!(
        op,
        Opcode::ATOMIC_CMP_AND_SWP | Opcode::ATOMIC_FETCH_AND_ADD
    )
}

/// An error completion: verbs leaves `opcode` and `byte_len` undefined, we zero them.
fn error_wc(wr_id: u64, status: WcStatus, qp_num: u32) -> PhysWc {
    PhysWc {
        wr_id,
        status,
        opcode: WcOpcode::SEND,
        qp_num,
        byte_len: 0,
        imm_data: None,
    }
}

impl State {
    /// The posting sequence number of the WQE a step on QP `i` would handle, or `None`
    /// when QP `i` has nothing runnable.
    pub(crate) fn runnable(&self, i: usize) -> Option<u64> {
        let qp = &self.qps[i];
        match qp.state {
            QpState::Init => None,
            QpState::Error => match (qp.sq.front(), qp.rq.front()) {
                (Some(s), Some(r)) => Some(s.seq.min(r.seq)),
                (s, r) => s.map(|e| e.seq).or(r.map(|e| e.seq)),
            },
            QpState::Rts => {
                let head = qp.sq.front()?;
                if qp.pace.is_some_and(|p| p.left == 0) {
                    return None;
                }
                let blocked = self.config.rnr_retry >= RNR_INFINITE
                    && qp.fail_after != Some(0)
                    && needs_recv(head.wqe.opcode)
                    && self.local_fault(i, head).is_none()
                    && qp.peer.is_some_and(|p| {
                        self.qps[p].state == QpState::Rts && self.qps[p].rq.is_empty()
                    });
                (!blocked).then_some(head.seq)
            }
        }
    }

    /// Runs one step; false when nothing was runnable.
    pub(crate) fn step(&mut self) -> bool {
        let Some(q) = self.pick() else {
            return false;
        };
        self.stats.steps += 1;
        match self.qps[q].state {
            QpState::Error => self.flush_one(q),
            QpState::Rts => {
                if let Some(p) = self.qps[q].pace.as_mut() {
                    p.left -= 1;
                }
                self.execute(q);
            }
            QpState::Init => debug_assert!(false, "QP in Init picked"),
        }
        true
    }

    /// Chooses the QP of the next step according to the policy.
    fn pick(&mut self) -> Option<usize> {
        let mut cand = std::mem::take(&mut self.scratch);
        cand.clear();
        cand.extend((0..self.qps.len()).filter_map(|i| self.runnable(i).map(|s| (i, s))));
        let chosen = match self.config.policy {
            _ if cand.is_empty() => None,
            ReorderPolicy::Fifo => cand.iter().min_by_key(|c| c.1).map(|c| c.0),
            ReorderPolicy::Adversarial => cand.iter().max_by_key(|c| c.1).map(|c| c.0),
            ReorderPolicy::Random => Some(cand[self.rng.below(cand.len())].0),
        };
        self.scratch = cand;
        chosen
    }

    /// The status a send WQE fails with before leaving the requester, if any.
    fn local_fault(&self, q: usize, e: &SendEntry) -> Option<WcStatus> {
        let w = &e.wqe;
        if is_atomic(w.opcode) && w.len != 8 {
            return Some(WcStatus::LOC_LEN_ERR);
        }
        if w.len == 0 {
            return None;
        }
        let need = if w.opcode == Opcode::RDMA_READ || is_atomic(w.opcode) {
            Access::LOCAL_WRITE
        } else {
            Access::NONE
        };
        let dev = self.qps[q].device;
        self.mem
            .check_local(dev, w.lkey, w.addr, w.len as usize, need)
            .err()
            .map(|_| WcStatus::LOC_PROT_ERR)
    }

    /// Flushes the oldest outstanding WQE of QP `q` (in `Error`).
    fn flush_one(&mut self, q: usize) {
        let qp = &mut self.qps[q];
        let send_first = match (qp.sq.front(), qp.rq.front()) {
            (Some(s), Some(r)) => s.seq < r.seq,
            (s, _) => s.is_some(),
        };
        qp.stats.flushed += 1;
        self.stats.flushed += 1;
        let (qp_num, send_cq, recv_cq) = (qp.qp_num, qp.send_cq, qp.recv_cq);
        if send_first {
            let Some(e) = qp.sq.pop_front() else { return };
            if e.wqe.flags.contains(SendFlags::SIGNALED) || self.config.flush_unsignaled {
                let wc = error_wc(e.wqe.wr_id, WcStatus::WR_FLUSH_ERR, qp_num);
                self.push_cqe(send_cq, wc, q, Slot::Send(e.idx));
            }
        } else {
            let Some(r) = qp.rq.pop_front() else { return };
            let wc = error_wc(r.wqe.wr_id, WcStatus::WR_FLUSH_ERR, qp_num);
            self.push_cqe(recv_cq, wc, q, Slot::Recv(r.idx));
        }
    }

    /// Executes (or RNR-delays) the head send WQE of QP `q` (in `Rts`).
    fn execute(&mut self, q: usize) {
        let Some(&e) = self.qps[q].sq.front() else {
            return;
        };
        let w = e.wqe;
        if self.qps[q].fail_after == Some(0) {
            return self.fail_head(q, WcStatus::RETRY_EXC_ERR);
        }
        if let Some(status) = self.local_fault(q, &e) {
            return self.fail_head(q, status);
        }
        // A responder in error drops every packet: the requester times out.
        let p = match self.qps[q].peer {
            Some(p) if self.qps[p].state == QpState::Rts => p,
            _ => return self.fail_head(q, WcStatus::RETRY_EXC_ERR),
        };
        if needs_recv(w.opcode) && self.qps[p].rq.is_empty() {
            return self.rnr_nak(q);
        }
        let pdev = self.qps[p].device;
        let len = w.len as usize;
        match w.opcode {
            Opcode::RDMA_WRITE | Opcode::RDMA_WRITE_WITH_IMM => {
                if len > 0 {
                    let checked = self.mem.check_remote(
                        pdev,
                        w.rkey,
                        w.remote_addr,
                        len,
                        Access::REMOTE_WRITE,
                    );
                    if checked.is_err() {
                        return self.remote_fail(q, p, WcStatus::REM_ACCESS_ERR);
                    }
                    if self.dma.copy(w.addr, w.remote_addr, len).is_err() {
                        return self.fail_head(q, WcStatus::LOC_PROT_ERR);
                    }
                }
                if w.opcode == Opcode::RDMA_WRITE_WITH_IMM {
                    let wc = |wr_id, qp_num| PhysWc {
                        wr_id,
                        status: WcStatus::SUCCESS,
                        opcode: WcOpcode::RECV_RDMA_WITH_IMM,
                        qp_num,
                        byte_len: w.len,
                        imm_data: Some(w.imm_data),
                    };
                    self.consume_recv(p, wc);
                }
                self.succeed(q, WcOpcode::RDMA_WRITE, w.len);
            }
            Opcode::SEND | Opcode::SEND_WITH_IMM => {
                let Some(r) = self.qps[p].rq.front().map(|r| r.wqe) else {
                    return;
                };
                let fault = if w.len > r.len {
                    Some((WcStatus::LOC_LEN_ERR, WcStatus::REM_INV_REQ_ERR))
                } else if len > 0
                    && self
                        .mem
                        .check_local(pdev, r.lkey, r.addr, len, Access::LOCAL_WRITE)
                        .is_err()
                {
                    Some((WcStatus::LOC_PROT_ERR, WcStatus::REM_OP_ERR))
                } else {
                    None
                };
                if let Some((at_responder, at_requester)) = fault {
                    self.consume_recv(p, |wr_id, qp_num| error_wc(wr_id, at_responder, qp_num));
                    return self.remote_fail(q, p, at_requester);
                }
                if self.dma.copy(w.addr, r.addr, len).is_err() {
                    return self.fail_head(q, WcStatus::LOC_PROT_ERR);
                }
                let imm = (w.opcode == Opcode::SEND_WITH_IMM).then_some(w.imm_data);
                self.consume_recv(p, |wr_id, qp_num| PhysWc {
                    wr_id,
                    status: WcStatus::SUCCESS,
                    opcode: WcOpcode::RECV,
                    qp_num,
                    byte_len: w.len,
                    imm_data: imm,
                });
                self.succeed(q, WcOpcode::SEND, w.len);
            }
            Opcode::RDMA_READ => {
                if len > 0 {
                    let checked = self.mem.check_remote(
                        pdev,
                        w.rkey,
                        w.remote_addr,
                        len,
                        Access::REMOTE_READ,
                    );
                    if checked.is_err() {
                        return self.remote_fail(q, p, WcStatus::REM_ACCESS_ERR);
                    }
                    if self.dma.copy(w.remote_addr, w.addr, len).is_err() {
                        return self.fail_head(q, WcStatus::LOC_PROT_ERR);
                    }
                }
                self.succeed(q, WcOpcode::RDMA_READ, w.len);
            }
            Opcode::ATOMIC_CMP_AND_SWP | Opcode::ATOMIC_FETCH_AND_ADD => {
                if w.remote_addr % 8 != 0 {
                    return self.remote_fail(q, p, WcStatus::REM_INV_REQ_ERR);
                }
                let checked =
                    self.mem
                        .check_remote(pdev, w.rkey, w.remote_addr, 8, Access::REMOTE_ATOMIC);
                if checked.is_err() {
                    return self.remote_fail(q, p, WcStatus::REM_ACCESS_ERR);
                }
                let Ok(old) = self.dma.read_u64(w.remote_addr) else {
                    return self.fail_head(q, WcStatus::LOC_PROT_ERR);
                };
                let new = if w.opcode == Opcode::ATOMIC_FETCH_AND_ADD {
                    old.wrapping_add(w.compare_add)
                } else if old == w.compare_add {
                    w.swap
                } else {
                    old
                };
                let moved = self
                    .dma
                    .write_u64(w.remote_addr, new)
                    .and_then(|()| self.dma.write_u64(w.addr, old));
                if moved.is_err() {
                    return self.fail_head(q, WcStatus::LOC_PROT_ERR);
                }
                self.succeed(q, w.opcode.completion(), 8);
            }
            // Refused at post time; kept as a status rather than a panic.
            _ => self.fail_head(q, WcStatus::LOC_QP_OP_ERR),
        }
    }

    /// The responder had no receive: count a failed attempt, give up after the limit.
    fn rnr_nak(&mut self, q: usize) {
        let limit = self.config.rnr_retry;
        let qp = &mut self.qps[q];
        qp.rnr_attempts += 1;
        qp.stats.rnr_naks += 1;
        self.stats.rnr_naks += 1;
        if limit < RNR_INFINITE && qp.rnr_attempts > u32::from(limit) {
            self.fail_head(q, WcStatus::RNR_RETRY_EXC_ERR);
        }
    }

    /// Pops the head receive of QP `p` and completes it with `make(wr_id, qp_num)`.
    fn consume_recv(&mut self, p: usize, make: impl FnOnce(u64, u32) -> PhysWc) {
        let qp = &mut self.qps[p];
        let Some(r) = qp.rq.pop_front() else { return };
        qp.stats.recvs_consumed += 1;
        let wc = make(r.wqe.wr_id, qp.qp_num);
        let cq = qp.recv_cq;
        self.push_cqe(cq, wc, p, Slot::Recv(r.idx));
    }

    /// Retires the head send WQE of `q` successfully.
    fn succeed(&mut self, q: usize, opcode: WcOpcode, byte_len: u32) {
        let qp = &mut self.qps[q];
        let Some(e) = qp.sq.pop_front() else { return };
        qp.rnr_attempts = 0;
        qp.stats.executed += 1;
        self.stats.executed += 1;
        if let Some(n) = qp.fail_after.as_mut() {
            *n = n.saturating_sub(1);
        }
        if qp.lose_ack_after == Some(0) {
            // It took effect at the responder, but the requester never hears so: its
            // retries run out, as they do when every acknowledgement is lost.
            qp.lose_ack_after = None;
            let (wc, cq) = (
                error_wc(e.wqe.wr_id, WcStatus::RETRY_EXC_ERR, qp.qp_num),
                qp.send_cq,
            );
            self.push_cqe(cq, wc, q, Slot::Send(e.idx));
            self.enter_error(q);
            return;
        }
        if let Some(n) = qp.lose_ack_after.as_mut() {
            *n -= 1;
        }
        if e.wqe.flags.contains(SendFlags::SIGNALED) {
            let wc = PhysWc {
                wr_id: e.wqe.wr_id,
                status: WcStatus::SUCCESS,
                opcode,
                qp_num: qp.qp_num,
                byte_len,
                imm_data: None,
            };
            let cq = qp.send_cq;
            self.push_cqe(cq, wc, q, Slot::Send(e.idx));
        }
    }

    /// Retires the head send WQE of `q` with `status` (always reported) and puts `q`
    /// in error.
    fn fail_head(&mut self, q: usize, status: WcStatus) {
        let qp = &mut self.qps[q];
        let Some(e) = qp.sq.pop_front() else { return };
        qp.stats.executed += 1;
        self.stats.executed += 1;
        let (wc, cq) = (error_wc(e.wqe.wr_id, status, qp.qp_num), qp.send_cq);
        self.push_cqe(cq, wc, q, Slot::Send(e.idx));
        self.enter_error(q);
    }

    /// A remote error: the requester's head fails with `status`, both ends go to error.
    fn remote_fail(&mut self, q: usize, p: usize, status: WcStatus) {
        self.fail_head(q, status);
        self.enter_error(p);
    }

    /// Writes a completion into CQ `cq`; if it is full, records an overflow and puts
    /// the producing QP `q` in error instead.
    fn push_cqe(&mut self, cq: usize, wc: PhysWc, q: usize, slot: Slot) {
        let c = &mut self.cqs[cq];
        if c.entries.len() >= c.capacity {
            c.overflows += 1;
            self.stats.overflows += 1;
            self.enter_error(q);
        } else {
            c.entries.push_back(CqEntry { wc, qp: q, slot });
            self.stats.cqes += 1;
            self.qps[q].stats.cqes += 1;
        }
    }

    /// Moves QP `q` to `Error`; its outstanding WQEs are flushed by later steps.
    pub(crate) fn enter_error(&mut self, q: usize) {
        let qp = &mut self.qps[q];
        qp.state = QpState::Error;
        qp.rnr_attempts = 0;
        qp.fail_after = None;
        qp.lose_ack_after = None;
    }
}
