//! softverbs behind a thin recording layer, for the tests that look at what the verbs
//! wrappers ask of a provider: how many post calls a chain takes, the (state, mask) of
//! every `ibv_modify_qp`, the QP's state at each receive posted. Everything the tests
//! see happen (data movement, the QP state machine, flushes, completion channels) is
//! softverbs' own behaviour; this layer only counts and forwards.
//!
//! It does two things softverbs cannot be asked to do. It refuses a particular WR: a
//! send or receive WR whose id is [`BAD_WR_ID`] is refused by the post (`EINVAL`,
//! `bad_wr` pointing at it) after the WRs before it in the chain were posted, which is
//! how the tests check that a partly accepted chain is reported as its prefix. And while
//! [`REFUSE_DEREG`] is set, `ibv_dereg_mr` answers `EBUSY` and leaves the region
//! registered, as a provider may while the region is in use.
#![allow(dead_code)]

use std::collections::HashMap;
use std::ffi::{c_int, c_uint};
use std::ptr::null_mut;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};

use vqp_host::sys::*;
use vqp_host::{Verbs, VerbsTable};

/// A send or receive WR with this id is refused by the post (`EINVAL`, `bad_wr` set
/// to it); the requests before it in the chain were posted.
pub const BAD_WR_ID: u64 = 0xbad;

/// What the layer saw, by QP number.
#[derive(Default)]
struct Record {
    /// (new state, mask) of every modify.
    history: HashMap<u32, Vec<(c_uint, c_uint)>>,
    /// The QP's state at each receive posted.
    recv_states: HashMap<u32, Vec<c_uint>>,
    /// Live QPs (the `ibv_qp` address), to query their state.
    qps: HashMap<u32, usize>,
    post_sends: u64,
    post_recvs: u64,
    /// `poll_cq` calls that failed (softverbs reports a CQ overrun that way).
    poll_errors: u64,
}

static RECORD: Mutex<Option<Record>> = Mutex::new(None);

fn with<R>(f: impl FnOnce(&mut Record) -> R) -> R {
    let mut g = RECORD.lock().unwrap_or_else(|e| e.into_inner());
    f(g.get_or_insert_with(Record::default))
}

/// softverbs' own functions, which the recording ones forward to.
fn soft() -> &'static VerbsTable {
    static TABLE: OnceLock<VerbsTable> = OnceLock::new();
    TABLE.get_or_init(vqp_softverbs::verbs_table)
}

/// softverbs' data-path operations (every context of it carries the same ones), saved
/// from the first context opened before they are replaced by the recording ones.
static SOFT_OPS: OnceLock<ibv_context_ops> = OnceLock::new();

fn soft_ops() -> &'static ibv_context_ops {
    SOFT_OPS
        .get()
        .expect("a context was opened before its ops were used")
}

unsafe extern "C" fn open_device(device: *mut ibv_device) -> *mut ibv_context {
    // SAFETY: forwarded as given.
    let ctx = unsafe { (soft().open_device)(device) };
    if !ctx.is_null() {
        // SAFETY: a context softverbs just opened; nothing else uses it yet, and
        // softverbs reads its ops only through callers, who then get these.
        let ops = unsafe { &mut (*ctx).ops };
        SOFT_OPS.get_or_init(|| *ops);
        ops.post_send = Some(post_send);
        ops.post_recv = Some(post_recv);
        ops.poll_cq = Some(poll_cq);
    }
    ctx
}

unsafe extern "C" fn create_qp(pd: *mut ibv_pd, init: *mut ibv_qp_init_attr) -> *mut ibv_qp {
    // SAFETY: forwarded as given.
    let qp = unsafe { (soft().create_qp)(pd, init) };
    if !qp.is_null() {
        // SAFETY: a QP softverbs just created.
        let qpn = unsafe { (*qp).qp_num };
        with(|r| r.qps.insert(qpn, qp as usize));
    }
    qp
}

unsafe extern "C" fn destroy_qp(qp: *mut ibv_qp) -> c_int {
    // SAFETY: a live QP (the caller's contract); read before it is destroyed.
    let qpn = unsafe { (*qp).qp_num };
    // SAFETY: forwarded as given.
    let rc = unsafe { (soft().destroy_qp)(qp) };
    if rc == 0 {
        with(|r| r.qps.remove(&qpn));
    }
    rc
}

unsafe extern "C" fn modify_qp(qp: *mut ibv_qp, attr: *mut ibv_qp_attr, mask: c_int) -> c_int {
    // SAFETY: a live QP and a readable attribute (the caller's contract).
    let (qpn, state) = unsafe { ((*qp).qp_num, (*attr).qp_state) };
    with(|r| {
        r.history
            .entry(qpn)
            .or_default()
            .push((state, mask as c_uint))
    });
    // SAFETY: forwarded as given.
    unsafe { (soft().modify_qp)(qp, attr, mask) }
}

/// The state softverbs reports for a live QP.
///
/// # Safety
/// `qp` is a live softverbs QP.
unsafe fn state_of(qp: *mut ibv_qp) -> c_uint {
    let mut attr = ibv_qp_attr::default();
    let mut init = ibv_qp_init_attr::default();
    // SAFETY: a live QP (the contract) and writable attributes.
    let rc = unsafe { (soft().query_qp)(qp, &mut attr, IBV_QP_STATE as c_int, &mut init) };
    if rc == 0 {
        attr.qp_state
    } else {
        IBV_QPS_UNKNOWN
    }
}

/// A send or receive WR, as a link of its chain.
trait Link {
    fn id(&self) -> u64;
    fn next(&mut self) -> &mut *mut Self;
}

impl Link for ibv_send_wr {
    fn id(&self) -> u64 {
        self.wr_id
    }
    fn next(&mut self) -> &mut *mut Self {
        &mut self.next
    }
}

impl Link for ibv_recv_wr {
    fn id(&self) -> u64 {
        self.wr_id
    }
    fn next(&mut self) -> &mut *mut Self {
        &mut self.next
    }
}

/// Posts `head`'s chain with `post`, except that its first WR with id [`BAD_WR_ID`] is
/// refused (`EINVAL`, `*bad` set to it) after the WRs before it were posted. Returns the
/// result and how many WRs were posted.
///
/// # Safety
/// `head` is a valid chain (or null) and `bad` a writable out-pointer, as for a post.
unsafe fn post_refusing_bad<W: Link>(
    head: *mut W,
    bad: *mut *mut W,
    post: impl FnOnce(*mut W) -> c_int,
) -> (c_int, usize) {
    let (mut prev, mut refused, mut before) = (null_mut::<W>(), head, 0);
    // SAFETY: every pointer followed is a link of the valid chain.
    while !refused.is_null() && unsafe { (*refused).id() } != BAD_WR_ID {
        prev = refused;
        // SAFETY: as above.
        refused = unsafe { *(*refused).next() };
        before += 1;
    }
    let rc = if before == 0 {
        0
    } else if refused.is_null() {
        post(head)
    } else {
        // SAFETY: `prev` is a link of the chain: cut after it for the post, then mended.
        unsafe { *(*prev).next() = null_mut() };
        let rc = post(head);
        // SAFETY: as above.
        unsafe { *(*prev).next() = refused };
        rc
    };
    if rc != 0 {
        // softverbs refused `*bad`: the WRs before it were posted.
        // SAFETY: the post wrote `*bad` when it failed.
        let stop = unsafe { *bad };
        let (mut posted, mut cur) = (0, head);
        while !cur.is_null() && cur != stop {
            posted += 1;
            // SAFETY: a link of the valid chain.
            cur = unsafe { *(*cur).next() };
        }
        return (rc, posted);
    }
    if refused.is_null() {
        return (0, before);
    }
    // SAFETY: a writable out-pointer (the contract).
    unsafe { *bad = refused };
    (libc::EINVAL, before)
}

unsafe extern "C" fn post_send(
    qp: *mut ibv_qp,
    wr: *mut ibv_send_wr,
    bad: *mut *mut ibv_send_wr,
) -> c_int {
    with(|r| r.post_sends += 1);
    let post = soft_ops().post_send.expect("softverbs posts sends");
    // SAFETY: the caller's chain and out-pointer, forwarded to softverbs' post.
    unsafe { post_refusing_bad(wr, bad, |head| post(qp, head, bad)) }.0
}

unsafe extern "C" fn post_recv(
    qp: *mut ibv_qp,
    wr: *mut ibv_recv_wr,
    bad: *mut *mut ibv_recv_wr,
) -> c_int {
    // SAFETY: a live QP (the caller's contract).
    let (qpn, state) = unsafe { ((*qp).qp_num, state_of(qp)) };
    with(|r| r.post_recvs += 1);
    let post = soft_ops().post_recv.expect("softverbs posts receives");
    // SAFETY: the caller's chain and out-pointer, forwarded to softverbs' post.
    let (rc, posted) = unsafe { post_refusing_bad(wr, bad, |head| post(qp, head, bad)) };
    with(|r| {
        r.recv_states
            .entry(qpn)
            .or_default()
            .extend(std::iter::repeat(state).take(posted))
    });
    rc
}

unsafe extern "C" fn poll_cq(cq: *mut ibv_cq, n: c_int, wc: *mut ibv_wc) -> c_int {
    let poll = soft_ops().poll_cq.expect("softverbs polls");
    // SAFETY: forwarded as given.
    let rc = unsafe { poll(cq, n, wc) };
    if rc < 0 {
        with(|r| r.poll_errors += 1);
    }
    rc
}

/// Set: `ibv_dereg_mr` refuses with `EBUSY` and the region stays registered.
pub static REFUSE_DEREG: AtomicBool = AtomicBool::new(false);

unsafe extern "C" fn dereg_mr(mr: *mut ibv_mr) -> c_int {
    if REFUSE_DEREG.load(Ordering::SeqCst) {
        return libc::EBUSY;
    }
    // SAFETY: forwarded as given (the caller's region).
    unsafe { (soft().dereg_mr)(mr) }
}

/// softverbs, with the recording functions in its table.
pub fn verbs() -> Verbs {
    let table = VerbsTable {
        open_device,
        create_qp,
        destroy_qp,
        modify_qp,
        dereg_mr,
        ..*soft()
    };
    // SAFETY: softverbs' table, five functions of which record (or refuse, see
    // `REFUSE_DEREG`) and forward to softverbs' own with the same arguments; its
    // contexts' ops likewise.
    unsafe { Verbs::from_table(table) }
}

/// The history of state transitions (state, mask) of QP `qpn`.
pub fn history(qpn: u32) -> Vec<(c_uint, c_uint)> {
    with(|r| r.history.get(&qpn).cloned().unwrap_or_default())
}

/// The QP's state at each receive posted to QP `qpn`.
pub fn recv_states(qpn: u32) -> Vec<c_uint> {
    with(|r| r.recv_states.get(&qpn).cloned().unwrap_or_default())
}

/// Receives the post accepted for QP `qpn`: before any traffic, what the QP holds.
pub fn posted_recvs(qpn: u32) -> usize {
    recv_states(qpn).len()
}

/// The state of live QP `qpn`, as softverbs reports it.
pub fn qp_state(qpn: u32) -> Option<c_uint> {
    let qp = with(|r| r.qps.get(&qpn).copied())?;
    // SAFETY: a QP in the map is live (removed when destroyed); the tests that ask
    // keep it alive while they do.
    Some(unsafe { state_of(qp as *mut ibv_qp) })
}

/// Calls to `post_send` and `post_recv` so far (all QPs).
pub fn post_calls() -> (u64, u64) {
    with(|r| (r.post_sends, r.post_recvs))
}

/// `poll_cq` calls that failed: softverbs fails the poll of a CQ that overflowed.
pub fn poll_errors() -> u64 {
    with(|r| r.poll_errors)
}

static SERIAL: Mutex<()> = Mutex::new(());

/// Holds other tests of the binary off while a test reads the layer's global counters.
pub fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}
