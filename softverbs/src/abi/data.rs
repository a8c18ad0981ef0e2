//! The data path: the functions in every context's `ibv_context_ops`, which verbs.h's
//! inline `ibv_post_send`, `ibv_post_recv`, `ibv_poll_cq` and `ibv_req_notify_cq` call.
//!
//! Objects here are not looked up in the registry of live handles (see `object`):
//! the inline wrappers have already read the object's context to find these functions.

use core::ffi::c_int;

use vqp_sys::*;

use super::object::{unchecked, AhObj, CqObj, MrObj, MwObj, QpObj, SrqObj};
use crate::mem::BindRequest;
use crate::provider;
use crate::qp::{sge_count, Datagram, RecvWqe, SendWqe, Sges};

/// Walks a send chain, turning each request into a [`SendWqe`] (or the errno that
/// refuses it), reading the application's structs as it goes.
struct SendChain<'q> {
    cur: *mut ibv_send_wr,
    qp: &'q crate::qp::Qp,
}

impl Iterator for SendChain<'_> {
    type Item = Result<SendWqe, i32>;

    fn next(&mut self) -> Option<Self::Item> {
        // SAFETY: the chain is valid and null-terminated (the caller's contract in
        // `post_send`); `cur` is null or the next request.
        let wr = unsafe { self.cur.as_ref() }?;
        self.cur = wr.next;
        Some(self.convert(wr))
    }
}

impl SendChain<'_> {
    fn convert(&self, wr: &ibv_send_wr) -> Result<SendWqe, i32> {
        let n = sge_count(wr.num_sge);
        self.qp.check_send(wr.opcode, wr.send_flags, n)?;
        let sges: &[ibv_sge] = if n == 0 {
            &[]
        } else if wr.sg_list.is_null() {
            return Err(libc::EINVAL);
        } else {
            // SAFETY: `sg_list` holds `num_sge` entries (contract), `num_sge` checked
            // against the QP's limit above.
            unsafe { core::slice::from_raw_parts(wr.sg_list, n as usize) }
        };
        let inline_flag = wr.send_flags & IBV_SEND_INLINE != 0;
        let inline = if inline_flag {
            let inline_len: u64 = sges.iter().map(|s| u64::from(s.length)).sum();
            self.qp.check_inline(inline_len)?;
            let mut data = Vec::with_capacity(inline_len as usize);
            for s in sges {
                if s.length == 0 {
                    continue;
                }
                // SAFETY: with IBV_SEND_INLINE the application guarantees each SGE's
                // buffer is readable for `length` bytes during the post; we copy it now.
                let bytes = unsafe {
                    core::slice::from_raw_parts(s.addr as usize as *const u8, s.length as usize)
                };
                data.extend_from_slice(bytes);
            }
            Some(data.into_boxed_slice())
        } else {
            None
        };
        // SAFETY: the `wr` union is read as the member the opcode selects; every member
        // is plain integers (or a pointer we do not dereference), valid for any bits.
        let (remote_addr, rkey, mut compare_add, mut swap) = unsafe {
            match wr.opcode {
                IBV_WR_ATOMIC_CMP_AND_SWP | IBV_WR_ATOMIC_FETCH_AND_ADD => (
                    wr.wr.atomic.remote_addr,
                    wr.wr.atomic.rkey,
                    wr.wr.atomic.compare_add,
                    wr.wr.atomic.swap,
                ),
                _ => (wr.wr.rdma.remote_addr, wr.wr.rdma.rkey, 0, 0),
            }
        };
        // SAFETY: both members of the immediate union are `u32`s over the same bytes.
        let imm = unsafe { wr.imm.imm_data };
        let ud = if self.qp.datagram() {
            // SAFETY: on a UD QP the `wr` union holds `ud` (the application's contract).
            let u = unsafe { wr.wr.ud };
            // SAFETY: a UD send names a live address handle of this provider (the
            // data path does not consult the registry, see the module docs).
            let Some(ah) = (unsafe { unchecked::<AhObj>(u.ah) }) else {
                return Err(libc::EINVAL);
            };
            if ah.dev.is_none() && ah.attr.is_global != 0 {
                // A GID no device here has: another machine's, recorded in the
                // operands a UD send does not use (see `SendWqe::set_remote_dgid`).
                (compare_add, swap) =
                    SendWqe::dgid_operands(vqp_sys::Gid::from_sys(&ah.attr.grh.dgid).as_bytes());
            }
            Some(Datagram {
                dev: ah.dev,
                qpn: u.remote_qpn & 0x00ff_ffff,
                qkey: u.remote_qkey,
                global: ah.attr.is_global != 0,
                sgid_index: ah.attr.grh.sgid_index,
            })
        } else {
            None
        };
        let bind = if wr.opcode == IBV_WR_BIND_MW {
            Some(self.bind(wr)?)
        } else {
            None
        };
        let xrc_srqn = if self.qp.qp_type == IBV_QPT_XRC_SEND {
            // SAFETY: the `qp_type` union has one member, `xrc`, a `u32`.
            unsafe { wr.qp_type.xrc.remote_srqn }
        } else {
            0
        };
        Ok(SendWqe {
            bind,
            wr_id: wr.wr_id,
            opcode: wr.opcode,
            signaled: wr.send_flags & IBV_SEND_SIGNALED != 0,
            solicited: wr.send_flags & IBV_SEND_SOLICITED != 0,
            imm,
            sges: if inline_flag {
                Sges::default()
            } else {
                Sges::from_slice(sges)
            },
            inline,
            remote_addr,
            rkey,
            compare_add,
            swap,
            ready_at: None,
            shaped: false,
            ud,
            xrc_srqn,
        })
    }
}

impl SendChain<'_> {
    /// What an `IBV_WR_BIND_MW` request binds: `EINVAL` without a window.
    fn bind(&self, wr: &ibv_send_wr) -> Result<Box<BindRequest>, i32> {
        // SAFETY: for IBV_WR_BIND_MW the union holds `bind_mw` (the application's
        // contract); its members are integers and pointers, valid for any bits.
        let b = unsafe { wr.bind_mw_tso.bind_mw };
        // SAFETY: a bind names a live window of this provider (the data path does not
        // consult the registry, see the module docs).
        let Some(mw) = (unsafe { unchecked::<MwObj>(b.mw) }) else {
            return Err(libc::EINVAL);
        };
        let mr = if b.bind_info.mr.is_null() {
            None
        } else {
            // SAFETY: a non-null region of a bind is a live MR of this provider
            // (contract, as above).
            unsafe { unchecked::<MrObj>(b.bind_info.mr) }.map(|m| m.ibv.lkey)
        };
        Ok(Box::new(BindRequest {
            handle: mw.handle,
            new_key: b.rkey,
            mr,
            addr: b.bind_info.addr,
            len: b.bind_info.length,
            access: b.bind_info.mw_access_flags,
            dev: self.qp.dev,
            pd: self.qp.pd,
            qpn: self.qp.qpn,
        }))
    }
}

/// Walks a receive chain.
struct RecvChain<'q> {
    cur: *mut ibv_recv_wr,
    /// The queue's check of a request's scatter count.
    check: &'q dyn Fn(u32) -> Result<(), i32>,
}

impl Iterator for RecvChain<'_> {
    type Item = Result<RecvWqe, i32>;

    fn next(&mut self) -> Option<Self::Item> {
        // SAFETY: a valid null-terminated chain (the caller's contract in `post_recv`).
        let wr = unsafe { self.cur.as_ref() }?;
        self.cur = wr.next;
        let n = sge_count(wr.num_sge);
        if let Err(e) = (self.check)(n) {
            return Some(Err(e));
        }
        let n = n as usize;
        if n > 0 && wr.sg_list.is_null() {
            return Some(Err(libc::EINVAL));
        }
        let sges: &[ibv_sge] = if n == 0 {
            &[]
        } else {
            // SAFETY: `sg_list` holds `num_sge` entries (contract), `num_sge` checked
            // against the QP's limit above.
            unsafe { core::slice::from_raw_parts(wr.sg_list, n) }
        };
        Some(Ok(RecvWqe {
            wr_id: wr.wr_id,
            sges: Sges::from_slice(sges),
        }))
    }
}

/// The `index`-th request of a chain (or the last one, for a short chain).
///
/// # Safety
/// `head` is a valid null-terminated chain whose link is read by `next`.
unsafe fn nth<T>(head: *mut T, index: u32, next: impl Fn(&T) -> *mut T) -> *mut T {
    let mut cur = head;
    for _ in 0..index {
        // SAFETY: a valid chain (contract); we stop at its end.
        match unsafe { cur.as_ref() } {
            Some(w) if !next(w).is_null() => cur = next(w),
            _ => break,
        }
    }
    cur
}

/// A post's return value: 0, or the errno with `*bad_wr` (when not null) set to the
/// first request of chain `head` not posted (the `posted`-th).
///
/// # Safety
/// `head` is a valid null-terminated chain whose link is read by `next`; `bad_wr` is
/// null or writable.
unsafe fn answer<T>(
    result: Result<(), i32>,
    head: *mut T,
    posted: u32,
    bad_wr: *mut *mut T,
    next: impl Fn(&T) -> *mut T,
) -> c_int {
    match result {
        Ok(()) => 0,
        Err(e) => {
            if !bad_wr.is_null() {
                // SAFETY: per the contract.
                unsafe { *bad_wr = nth(head, posted, next) };
            }
            e
        }
    }
}

/// `ops.post_send`: queues the chain; on failure `*bad_wr` is the first request not
/// posted (those before it were), and the return value an errno, as mlx5 answers (see
/// `Qp::check_send`): `EINVAL` (bad opcode, inline on a READ or atomic, an atomic
/// without one SGE), `ENOMEM` (send queue full, more SGEs than `max_send_sge`, inline
/// data over `max_inline_data`, a QP that has not reached RTS: see
/// `Qp::post_send`). A negative `num_sge` is taken
/// as no SGEs (see `sge_count`).
///
/// # Safety
/// `qp` is a live QP of this provider; `wr` is a valid null-terminated chain whose SGE
/// lists hold `num_sge` entries; `bad_wr` points to a writable pointer.
pub(super) unsafe extern "C" fn post_send(
    qp: *mut ibv_qp,
    wr: *mut ibv_send_wr,
    bad_wr: *mut *mut ibv_send_wr,
) -> c_int {
    // SAFETY: per the contract.
    let Some(q) = (unsafe { unchecked::<QpObj>(qp) }) else {
        return libc::EINVAL;
    };
    let mut chain = SendChain {
        cur: wr,
        qp: &q.core,
    };
    let (posted, queued, result) = q.core.post_send(&mut chain);
    let p = provider::get();
    p.engine.enqueue(p, q.core.core(), queued);
    // SAFETY: `wr` is the valid chain and `bad_wr` null or writable (contract).
    unsafe { answer(result, wr, posted, bad_wr, |w| w.next) }
}

/// `ops.post_recv`: as [`post_send`], for the receive queue: `EINVAL` in RESET or for
/// more SGEs than `max_recv_sge`, `ENOMEM` when the receive queue is full.
///
/// # Safety
/// As [`post_send`].
pub(super) unsafe extern "C" fn post_recv(
    qp: *mut ibv_qp,
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
) -> c_int {
    // SAFETY: per the contract.
    let Some(q) = (unsafe { unchecked::<QpObj>(qp) }) else {
        return libc::EINVAL;
    };
    let check = |n| q.core.check_recv(n);
    let mut chain = RecvChain {
        cur: wr,
        check: &check,
    };
    let (posted, result) = q.core.post_recv(&mut chain);
    // SAFETY: `wr` is the valid chain and `bad_wr` null or writable (contract).
    unsafe { answer(result, wr, posted, bad_wr, |w| w.next) }
}

/// `ops.post_srq_recv`: as [`post_recv`], for a shared receive queue: `EINVAL` for
/// more SGEs than its `max_sge`, `ENOMEM` when it is full.
///
/// # Safety
/// `srq` is a live SRQ of this provider; `wr` a valid chain; `bad_wr` null or writable.
pub(super) unsafe extern "C" fn post_srq_recv(
    srq: *mut ibv_srq,
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
) -> c_int {
    // SAFETY: per the contract.
    let Some(s) = (unsafe { unchecked::<SrqObj>(srq) }) else {
        return libc::EINVAL;
    };
    let check = |n| s.core.check_recv(n);
    let mut chain = RecvChain {
        cur: wr,
        check: &check,
    };
    let (posted, result) = s.core.post(&mut chain);
    // SAFETY: `wr` is the valid chain and `bad_wr` null or writable (contract).
    unsafe { answer(result, wr, posted, bad_wr, |w| w.next) }
}

/// `ops.poll_cq`: runs the progress engine (if no other thread is) and serves other
/// machines' messages (`Provider::poll_turn`), then moves up to
/// `num_entries` completions into `wc`. Returns the count, or -1 once an overflowed CQ
/// has nothing left. `num_entries` of 0 or less polls nothing and returns 0, as mlx5's
/// `poll_cq` (`providers/mlx5/cq.c`: its loop `npolled < ne` never runs) does.
///
/// # Safety
/// `cq` is a live CQ; `wc` has room for `num_entries` entries.
pub(super) unsafe extern "C" fn poll_cq(
    cq: *mut ibv_cq,
    num_entries: c_int,
    wc: *mut ibv_wc,
) -> c_int {
    // SAFETY: per the contract.
    let Some(q) = (unsafe { unchecked::<CqObj>(cq) }) else {
        return -1;
    };
    if num_entries <= 0 {
        return 0;
    }
    if wc.is_null() {
        return -1;
    }
    provider::get().poll_turn();
    let polled = q.core.poll(num_entries as usize, |i, entry| {
        // SAFETY: `i < num_entries` (the CQ hands out at most that many) and `wc` has
        // room for `num_entries` entries (contract).
        unsafe { wc.add(i).write(entry) }
    });
    match polled {
        Ok(n) => n as c_int,
        Err(_) => -1,
    }
}

/// `ops.req_notify_cq`: arms the CQ; `EINVAL` when it has no completion channel.
///
/// # Safety
/// `cq` is a live CQ.
pub(super) unsafe extern "C" fn req_notify_cq(cq: *mut ibv_cq, solicited_only: c_int) -> c_int {
    // SAFETY: per the contract.
    let Some(q) = (unsafe { unchecked::<CqObj>(cq) }) else {
        return libc::EINVAL;
    };
    match q.core.arm(solicited_only != 0) {
        Ok(()) => 0,
        Err(e) => e,
    }
}
