//! The fake's global state (its QPs, CQs and completion channels) and what tests read of it.

use std::collections::{HashMap, VecDeque};
use std::ffi::{c_int, c_uint};
use std::sync::{Mutex, MutexGuard};

use vqp_host::sys::*;

#[derive(Default)]
pub(super) struct FakeQp {
    pub(super) qpn: u32,
    pub(super) state: c_uint,
    pub(super) dest: u32,
    pub(super) send_cq: usize,
    pub(super) recv_cq: usize,
    pub(super) recvs: VecDeque<(u64, u64, u32)>,
    /// (new state, mask) of every modify.
    pub(super) history: Vec<(c_uint, c_uint)>,
    /// The QP's state at each receive posted.
    pub(super) recv_states: Vec<c_uint>,
}

#[derive(Default)]
pub(super) struct FakeCq {
    pub(super) cap: usize,
    pub(super) wcs: VecDeque<ibv_wc>,
    pub(super) overflows: u64,
    /// The completion channel (address), 0 for none.
    pub(super) channel: usize,
    /// Armed by `req_notify_cq`: the next completion raises an event.
    pub(super) armed: bool,
}

/// A completion channel: a pipe whose read end is the channel's descriptor, one byte
/// per pending event, and the CQs those events name.
pub(super) struct FakeChannel {
    pub(super) read: c_int,
    pub(super) write: c_int,
    pub(super) events: VecDeque<usize>,
}

#[derive(Default)]
pub(super) struct State {
    /// By `ibv_qp` address.
    pub(super) qps: HashMap<usize, FakeQp>,
    pub(super) by_qpn: HashMap<u32, usize>,
    /// By `ibv_cq` address.
    pub(super) cqs: HashMap<usize, FakeCq>,
    /// By `ibv_comp_channel` address.
    pub(super) channels: HashMap<usize, FakeChannel>,
    pub(super) next_qpn: u32,
    pub(super) post_sends: u64,
    pub(super) post_recvs: u64,
}

static STATE: Mutex<Option<State>> = Mutex::new(None);

fn state() -> MutexGuard<'static, Option<State>> {
    STATE.lock().unwrap_or_else(|e| e.into_inner())
}

pub(super) fn with<R>(f: impl FnOnce(&mut State) -> R) -> R {
    let mut g = state();
    let s = g.get_or_insert_with(|| State {
        next_qpn: 0x100,
        ..State::default()
    });
    f(s)
}

/// `f` of QP `qpn`, if there is one.
fn with_qp<R>(qpn: u32, f: impl FnOnce(&FakeQp) -> R) -> Option<R> {
    with(|s| s.by_qpn.get(&qpn).and_then(|k| s.qps.get(k)).map(f))
}

/// The history of state transitions (state, mask) of QP `qpn`.
pub fn history(qpn: u32) -> Vec<(c_uint, c_uint)> {
    with_qp(qpn, |q| q.history.clone()).unwrap_or_default()
}

/// The QP's state at each receive posted to QP `qpn`.
pub fn recv_states(qpn: u32) -> Vec<c_uint> {
    with_qp(qpn, |q| q.recv_states.clone()).unwrap_or_default()
}

/// The state of QP `qpn`.
pub fn qp_state(qpn: u32) -> Option<c_uint> {
    with_qp(qpn, |q| q.state)
}

/// Receives held by QP `qpn`.
pub fn held_recvs(qpn: u32) -> usize {
    with_qp(qpn, |q| q.recvs.len()).unwrap_or(0)
}

/// Calls to `post_send` and `post_recv` so far (all QPs).
pub fn post_calls() -> (u64, u64) {
    with(|s| (s.post_sends, s.post_recvs))
}

/// Completions dropped because a CQ was full.
pub fn overflows() -> u64 {
    with(|s| s.cqs.values().map(|c| c.overflows).sum())
}
