//! The RC, UC and UD state machines: the transitions the specification allows, the
//! attributes each one requires or accepts, their values, and `ibv_modify_qp` /
//! `ibv_query_qp`.

use vqp_sys::*;

use std::sync::atomic::Ordering;
use std::sync::Weak;

use super::{Qp, MAX_RD_ATOMIC};

/// `IBV_QP_*` masks of each RC transition: (required, optional), `IBV_QP_STATE` aside.
#[cfg(test)]
pub(super) fn transition(cur: u32, next: u32) -> Option<(u32, u32)> {
    transition_of(IBV_QPT_RC, cur, next)
}

/// The masks of a transition of a QP of type `qp_type` (RC or UC), as the kernel's
/// `qp_state_table` (`drivers/infiniband/core/verbs.c`) lists them: UC needs neither
/// the RNR timer nor the read/atomic depths, nor the timeout and retry counts (it has
/// no acknowledgements to time out).
pub(super) fn transition_of(qp_type: u32, cur: u32, next: u32) -> Option<(u32, u32)> {
    if qp_type == IBV_QPT_UD {
        return ud_transition(cur, next);
    }
    if matches!(qp_type, IBV_QPT_XRC_SEND | IBV_QPT_XRC_RECV) {
        return xrc_transition(qp_type == IBV_QPT_XRC_RECV, cur, next);
    }
    let uc = qp_type == IBV_QPT_UC;
    const INIT_OPT: u32 = IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
    let rts_opt: u32 = IBV_QP_CUR_STATE
        | IBV_QP_ACCESS_FLAGS
        | IBV_QP_ALT_PATH
        | IBV_QP_PATH_MIG_STATE
        | if uc { 0 } else { IBV_QP_MIN_RNR_TIMER };
    if uc {
        match (cur, next) {
            (IBV_QPS_INIT, IBV_QPS_RTR) => {
                return Some((
                    IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN,
                    IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX,
                ))
            }
            (IBV_QPS_RTR, IBV_QPS_RTS) => return Some((IBV_QP_SQ_PSN, rts_opt)),
            _ => {}
        }
    }
    match (cur, next) {
        (_, IBV_QPS_RESET) | (_, IBV_QPS_ERR) => Some((0, 0)),
        (IBV_QPS_RESET, IBV_QPS_INIT) => Some((INIT_OPT, 0)),
        (IBV_QPS_INIT, IBV_QPS_INIT) => Some((0, INIT_OPT)),
        (IBV_QPS_INIT, IBV_QPS_RTR) => Some((
            IBV_QP_AV
                | IBV_QP_PATH_MTU
                | IBV_QP_DEST_QPN
                | IBV_QP_RQ_PSN
                | IBV_QP_MAX_DEST_RD_ATOMIC
                | IBV_QP_MIN_RNR_TIMER,
            IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX,
        )),
        (IBV_QPS_RTR, IBV_QPS_RTS) => Some((
            IBV_QP_TIMEOUT
                | IBV_QP_RETRY_CNT
                | IBV_QP_RNR_RETRY
                | IBV_QP_SQ_PSN
                | IBV_QP_MAX_QP_RD_ATOMIC,
            rts_opt,
        )),
        (IBV_QPS_RTS, IBV_QPS_RTS) => Some((0, rts_opt)),
        _ => None,
    }
}

/// The masks of a UD transition (the kernel's `qp_state_table`): the Q_Key at INIT,
/// nothing at RTR (there is no connection), the send PSN at RTS.
fn ud_transition(cur: u32, next: u32) -> Option<(u32, u32)> {
    const INIT: u32 = IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY;
    match (cur, next) {
        (_, IBV_QPS_RESET) | (_, IBV_QPS_ERR) => Some((0, 0)),
        (IBV_QPS_RESET, IBV_QPS_INIT) => Some((INIT, 0)),
        (IBV_QPS_INIT, IBV_QPS_INIT) => Some((0, INIT)),
        (IBV_QPS_INIT, IBV_QPS_RTR) => Some((0, IBV_QP_PKEY_INDEX | IBV_QP_QKEY)),
        (IBV_QPS_RTR, IBV_QPS_RTS) => Some((IBV_QP_SQ_PSN, IBV_QP_CUR_STATE | IBV_QP_QKEY)),
        (IBV_QPS_RTS, IBV_QPS_RTS) => Some((0, IBV_QP_CUR_STATE | IBV_QP_QKEY)),
        _ => None,
    }
}

/// The masks of an XRC transition, as the kernel's `qp_state_table` has them for
/// `IB_QPT_XRC_INI` (the send half, `recv` false) and `IB_QPT_XRC_TGT` (the receive
/// half): the send half has no responder attributes at RTR (no read/atomic depth, no
/// RNR timer: it receives nothing); the receive half sends nothing but
/// acknowledgements, so RTS needs only the timeout and the send PSN.
fn xrc_transition(recv: bool, cur: u32, next: u32) -> Option<(u32, u32)> {
    const INIT: u32 = IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
    let rts_opt = IBV_QP_CUR_STATE
        | IBV_QP_ALT_PATH
        | IBV_QP_ACCESS_FLAGS
        | IBV_QP_PATH_MIG_STATE
        | if recv { IBV_QP_MIN_RNR_TIMER } else { 0 };
    match (cur, next) {
        (_, IBV_QPS_RESET) | (_, IBV_QPS_ERR) => Some((0, 0)),
        (IBV_QPS_RESET, IBV_QPS_INIT) => Some((INIT, 0)),
        (IBV_QPS_INIT, IBV_QPS_INIT) => Some((0, INIT)),
        (IBV_QPS_INIT, IBV_QPS_RTR) => Some((
            IBV_QP_AV
                | IBV_QP_PATH_MTU
                | IBV_QP_DEST_QPN
                | IBV_QP_RQ_PSN
                | if recv {
                    IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER
                } else {
                    0
                },
            IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX,
        )),
        (IBV_QPS_RTR, IBV_QPS_RTS) if recv => Some((IBV_QP_TIMEOUT | IBV_QP_SQ_PSN, rts_opt)),
        (IBV_QPS_RTR, IBV_QPS_RTS) => Some((
            IBV_QP_TIMEOUT
                | IBV_QP_RETRY_CNT
                | IBV_QP_RNR_RETRY
                | IBV_QP_SQ_PSN
                | IBV_QP_MAX_QP_RD_ATOMIC,
            rts_opt,
        )),
        (IBV_QPS_RTS, IBV_QPS_RTS) => Some((0, rts_opt)),
        _ => None,
    }
}

/// The mask without the attributes the kernel ignores for an XRC QP before it checks
/// the transition (`modify_qp_mask`, drivers/infiniband/core/uverbs_cmd.c): the
/// responder's read depth and RNR timer of a send half, the retry counts and read depth
/// of a receive half. Programs written for RC masks (perftest, xsrq_pingpong) rely on it.
fn ignored_removed(qp_type: u32, mask: u32) -> u32 {
    match qp_type {
        IBV_QPT_XRC_SEND => mask & !(IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER),
        IBV_QPT_XRC_RECV => mask & !(IBV_QP_MAX_QP_RD_ATOMIC | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY),
        _ => mask,
    }
}

/// Access bits a QP's `qp_access_flags` may carry: those it grants its peer, and the
/// region-only bits (zero-based, on-demand, huge pages, the optional range), which the
/// kernel passes through and mlx5 ignores (`to_mlx5_access_flags` reads the remote
/// bits only) — rdma-core's own tests give a QP its regions' flags.
const QP_ACCESS_BITS: u32 = IBV_ACCESS_LOCAL_WRITE
    | IBV_ACCESS_REMOTE_WRITE
    | IBV_ACCESS_REMOTE_READ
    | IBV_ACCESS_REMOTE_ATOMIC
    | IBV_ACCESS_MW_BIND
    | IBV_ACCESS_ZERO_BASED
    | IBV_ACCESS_ON_DEMAND
    | IBV_ACCESS_HUGETLB
    | IBV_ACCESS_OPTIONAL_RANGE;

/// Checks the values of the attributes named in `mask`.
fn check_values(a: &ibv_qp_attr, mask: u32, gids: usize) -> Result<(), i32> {
    let bad = |cond: bool| if cond { Err(libc::EINVAL) } else { Ok(()) };
    let psn_ok = |v: u32| v <= 0x00ff_ffff;
    if mask & IBV_QP_PORT != 0 {
        bad(a.port_num != 1)?;
    }
    if mask & IBV_QP_PKEY_INDEX != 0 {
        bad(a.pkey_index != 0)?;
    }
    if mask & IBV_QP_ACCESS_FLAGS != 0 {
        bad(a.qp_access_flags & !QP_ACCESS_BITS != 0)?;
    }
    if mask & IBV_QP_PATH_MTU != 0 {
        bad(!(IBV_MTU_256..=IBV_MTU_4096).contains(&a.path_mtu))?;
    }
    if mask & IBV_QP_DEST_QPN != 0 {
        bad(!psn_ok(a.dest_qp_num))?;
    }
    if mask & IBV_QP_RQ_PSN != 0 {
        bad(!psn_ok(a.rq_psn))?;
    }
    if mask & IBV_QP_SQ_PSN != 0 {
        bad(!psn_ok(a.sq_psn))?;
    }
    if mask & IBV_QP_MAX_DEST_RD_ATOMIC != 0 {
        bad(a.max_dest_rd_atomic > MAX_RD_ATOMIC)?;
    }
    if mask & IBV_QP_MAX_QP_RD_ATOMIC != 0 {
        bad(a.max_rd_atomic > MAX_RD_ATOMIC)?;
    }
    if mask & IBV_QP_MIN_RNR_TIMER != 0 {
        bad(a.min_rnr_timer > 31)?;
    }
    if mask & IBV_QP_TIMEOUT != 0 {
        bad(a.timeout > 31)?;
    }
    if mask & IBV_QP_RETRY_CNT != 0 {
        bad(a.retry_cnt > 7)?;
    }
    if mask & IBV_QP_RNR_RETRY != 0 {
        bad(a.rnr_retry > 7)?;
    }
    if mask & IBV_QP_AV != 0 {
        let ah = &a.ah_attr;
        bad(ah.port_num > 1)?;
        bad(ah.is_global != 0 && usize::from(ah.grh.sgid_index) >= gids)?;
        bad(ah.is_global == 0 && ah.dlid == 0)?;
    }
    Ok(())
}

impl Qp {
    /// `ibv_modify_qp`: validates the transition and the mask, then applies it.
    /// `gids` is the length of the port's GID table (a source GID index must be in
    /// it); `resolve` says which device an address vector points at (the provider's
    /// device table, which lies above the QP object).
    pub fn modify(
        &self,
        attr: &ibv_qp_attr,
        mask: u32,
        gids: usize,
        resolve: impl FnOnce(&ibv_ah_attr) -> Option<usize>,
    ) -> Result<(), i32> {
        let mask = ignored_removed(self.qp_type, mask);
        let mut g = self.lock();
        let cur = if mask & IBV_QP_CUR_STATE != 0 {
            if attr.cur_qp_state != g.state {
                return Err(libc::EINVAL);
            }
            attr.cur_qp_state
        } else {
            g.state
        };
        let next = if mask & IBV_QP_STATE != 0 {
            attr.qp_state
        } else {
            cur
        };
        let (required, optional) = transition_of(self.qp_type, cur, next).ok_or(libc::EINVAL)?;
        let given = mask & !IBV_QP_STATE;
        if given & required != required || given & !(required | optional) != 0 {
            return Err(libc::EINVAL);
        }
        check_values(attr, given, gids)?;
        apply(&mut g.attr, attr, given);
        match next {
            IBV_QPS_RESET => {
                g.sq.clear();
                g.rq.clear();
                g.sq_open = false;
                g.rq_open = false;
                self.slots.store(0, Ordering::Release);
                g.unsignaled = 0;
                g.attr = ibv_qp_attr::default();
                g.peer = Weak::new();
                g.remote = Default::default();
                g.rnr_tries = 0;
                g.retries = 0;
                g.not_before = None;
            }
            IBV_QPS_ERR if g.state != IBV_QPS_ERR => {
                g.state = IBV_QPS_ERR;
                self.state.store(IBV_QPS_ERR, Ordering::Release);
                self.flush(&mut g);
                self.last_wqe_reached();
            }
            IBV_QPS_RTR => {
                g.peer = Weak::new();
                g.remote = Default::default();
            }
            IBV_QPS_INIT => g.rq_open = true,
            IBV_QPS_RTS => g.sq_open = true,
            _ => {}
        }
        g.state = next;
        self.state.store(next, Ordering::Release);
        let dest_dev = matches!(next, IBV_QPS_RTR | IBV_QPS_RTS)
            .then(|| resolve(&g.attr.ah_attr))
            .flatten();
        self.export(&g, dest_dev);
        if next == IBV_QPS_RESET {
            // Under the QP's lock (the order completions are pushed in): nothing of
            // this QP lands on its CQs after the clean.
            self.clean_cqs();
        }
        if given & IBV_QP_PATH_MIG_STATE != 0 && attr.path_mig_state != IBV_MIG_MIGRATED {
            // Automatic path migration is not supported (the device does not advertise
            // IBV_DEVICE_AUTO_PATH_MIG): an alternate path asked to be armed cannot be
            // loaded, which the QP reports as a failed migration, and it stays on its
            // primary path.
            g.attr.path_mig_state = IBV_MIG_MIGRATED;
            self.ctx.raise(
                crate::cq::event::PATH_MIG_ERR,
                self.handle.load(Ordering::Relaxed),
            );
        }
        Ok(())
    }

    /// `ibv_query_qp`: the attributes with the current state and the granted sizes.
    pub fn query(&self) -> ibv_qp_attr {
        let g = self.lock();
        let mut a = g.attr;
        a.qp_state = g.state;
        a.cur_qp_state = g.state;
        a.cap = self.cap;
        if a.port_num == 0 {
            a.port_num = 1;
        }
        a
    }
}

/// Copies the attributes named in `mask` from `src` into `dst`.
fn apply(dst: &mut ibv_qp_attr, src: &ibv_qp_attr, mask: u32) {
    let has = |bit: u32| mask & bit != 0;
    if has(IBV_QP_ACCESS_FLAGS) {
        dst.qp_access_flags = src.qp_access_flags;
    }
    if has(IBV_QP_PKEY_INDEX) {
        dst.pkey_index = src.pkey_index;
    }
    if has(IBV_QP_QKEY) {
        dst.qkey = src.qkey;
    }
    if has(IBV_QP_PORT) {
        dst.port_num = src.port_num;
    }
    if has(IBV_QP_AV) {
        dst.ah_attr = src.ah_attr;
    }
    if has(IBV_QP_PATH_MTU) {
        dst.path_mtu = src.path_mtu;
    }
    if has(IBV_QP_DEST_QPN) {
        dst.dest_qp_num = src.dest_qp_num;
    }
    if has(IBV_QP_RQ_PSN) {
        dst.rq_psn = src.rq_psn;
    }
    if has(IBV_QP_SQ_PSN) {
        dst.sq_psn = src.sq_psn;
    }
    if has(IBV_QP_MAX_DEST_RD_ATOMIC) {
        dst.max_dest_rd_atomic = src.max_dest_rd_atomic;
    }
    if has(IBV_QP_MAX_QP_RD_ATOMIC) {
        dst.max_rd_atomic = src.max_rd_atomic;
    }
    if has(IBV_QP_MIN_RNR_TIMER) {
        dst.min_rnr_timer = src.min_rnr_timer;
    }
    if has(IBV_QP_TIMEOUT) {
        dst.timeout = src.timeout;
    }
    if has(IBV_QP_RETRY_CNT) {
        dst.retry_cnt = src.retry_cnt;
    }
    if has(IBV_QP_RNR_RETRY) {
        dst.rnr_retry = src.rnr_retry;
    }
    if has(IBV_QP_ALT_PATH) {
        dst.alt_ah_attr = src.alt_ah_attr;
        dst.alt_pkey_index = src.alt_pkey_index;
        dst.alt_port_num = src.alt_port_num;
        dst.alt_timeout = src.alt_timeout;
    }
    if has(IBV_QP_PATH_MIG_STATE) {
        dst.path_mig_state = src.path_mig_state;
    }
}
