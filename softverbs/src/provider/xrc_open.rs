//! `ibv_open_qp` of an XRC receive QP that another process of the domain created: the
//! opener's handle is a stand-in whose verbs (modify, query, destroy) are calls to the
//! QP's owner, which holds the QP for the opener until it closes (or dies) and sends
//! it the QP's affiliated events. As the kernel's shared XRC TGT QP
//! (`drivers/infiniband/core/verbs.c`: `ib_open_qp`, `__ib_shared_qp_event_handler`,
//! `__ib_destroy_shared_qp`): every handle holds the QP, the last one to close
//! destroys it, and each handle gets the QP's events.
//!
//! A call is one [`Kind::XrcCall`] record to the owner (the operation in `code`, the
//! call's number in `psn`, the opener's handle in `remote_addr`, the attributes in the
//! payload) answered by one [`Kind::XrcReply`] (an errno in `code`, attributes in the
//! payload); the caller waits for the answer a bounded time. The engine hands these
//! records here (`engine::Tables::on_object_record`): the verbs they run are the QP
//! object's, above the engine.
//!
//! The state of these calls is the provider's ([`XrcOpen`], one per process): the
//! calls waiting for an answer in a fixed table ([`Calls`]), the QPs other processes
//! hold, and our handles on other processes' QPs.

use std::collections::BTreeMap;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use vqp_sys::*;

use super::Provider;
use crate::cq::CtxCore;
use crate::os::lock;
use crate::qp::Qp;
use crate::shared::inbox::{Kind, PushError, Record};
use crate::shared::{Owner, Shared};

/// Operations of a call.
pub(crate) const OP_OPEN: u32 = 1;
pub(crate) const OP_MODIFY: u32 = 2;
pub(crate) const OP_QUERY: u32 = 3;
pub(crate) const OP_CLOSE: u32 = 4;

/// How long a caller waits for the owner's answer.
const WAIT: Duration = Duration::from_secs(5);

/// Words of the attributes [`encode_attr`] writes, before the 16-byte destination GID.
const ATTR_WORDS: usize = 27;
/// Bytes of encoded attributes: the largest payload of a call or an answer.
pub(crate) const ATTR_LEN: usize = ATTR_WORDS * 4 + 16;

/// Calls that may wait for an answer at once in a process. A caller waits for its own
/// answer, so this bounds the threads inside an XRC verb on another process's QP at one
/// time; one more gets `ENOMEM`, the errno of a verb that finds the device's resources
/// used up (rdma-core's `mlx5_open_qp` fails so when it cannot allocate its QP).
pub(crate) const CALL_SLOTS: usize = 32;
const _: () = assert!(CALL_SLOTS.is_power_of_two() && CALL_SLOTS <= 1 << 8);

/// The payload of an answer, held in place (no allocation per call).
#[derive(Clone, Copy)]
pub(crate) struct Answer {
    len: usize,
    buf: [u8; ATTR_LEN],
}

impl Answer {
    /// An answer with no payload.
    const EMPTY: Answer = Answer {
        len: 0,
        buf: [0; ATTR_LEN],
    };

    /// The payload's bytes.
    pub(crate) fn bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

/// One place of the call table.
#[derive(Clone, Copy)]
enum Slot {
    /// No call uses it.
    Free,
    /// Call `id` waits for its answer.
    Waiting { id: u32 },
    /// Call `id` was answered: the owner's errno and payload.
    Answered { id: u32, errno: i32, answer: Answer },
}

/// The calls waiting for an answer: [`CALL_SLOTS`] places, reused. A call's number (the
/// record's `psn`, which the answer carries back) is its place in the low bits and the
/// place's use count above them, so that a late answer to a call that gave up is not
/// taken for the answer to the next call in the same place.
pub(crate) struct Calls {
    /// The places, and each one's use count (for the next call's number).
    slots: Mutex<([Slot; CALL_SLOTS], [u32; CALL_SLOTS])>,
    /// Signalled when an answer arrives.
    cv: Condvar,
}

impl Default for Calls {
    fn default() -> Calls {
        Calls {
            slots: Mutex::new(([Slot::Free; CALL_SLOTS], [0; CALL_SLOTS])),
            cv: Condvar::new(),
        }
    }
}

/// A place taken in [`Calls`] by one call; the place is freed when it drops.
pub(crate) struct Ticket<'a> {
    calls: &'a Calls,
    id: u32,
}

impl Calls {
    /// Takes a free place for a call: its ticket (the call's number is `ticket.id()`),
    /// or `ENOMEM` when every place is taken.
    pub(crate) fn begin(&self) -> Result<Ticket<'_>, i32> {
        let mut g = lock(&self.slots);
        let (slots, uses) = &mut *g;
        let i = slots
            .iter()
            .position(|s| matches!(s, Slot::Free))
            .ok_or(libc::ENOMEM)?;
        uses[i] = uses[i].wrapping_add(1);
        let id = (uses[i] << CALL_SLOTS.trailing_zeros()) | i as u32;
        slots[i] = Slot::Waiting { id };
        Ok(Ticket { calls: self, id })
    }

    /// Answer `errno` with `payload` to call `id`; ignored when no call `id` waits (it
    /// gave up, or the number is not one of ours). A payload larger than any answer is
    /// `EPROTO`.
    pub(crate) fn answer(&self, id: u32, errno: i32, payload: &[u8]) {
        let mut g = lock(&self.slots);
        let Some(slot) = g.0.get_mut(id as usize % CALL_SLOTS) else {
            return;
        };
        if !matches!(*slot, Slot::Waiting { id: w } if w == id) {
            return;
        }
        let mut answer = Answer::EMPTY;
        let errno = match answer.buf.get_mut(..payload.len()) {
            Some(b) => {
                b.copy_from_slice(payload);
                answer.len = payload.len();
                errno
            }
            None => libc::EPROTO,
        };
        *slot = Slot::Answered { id, errno, answer };
        drop(g);
        self.cv.notify_all();
    }
}

impl Ticket<'_> {
    /// The call's number.
    pub(crate) fn id(&self) -> u32 {
        self.id
    }

    /// Waits until `end` for the answer: its payload, or the owner's errno;
    /// `ETIMEDOUT` when none came in time or `alive` says the owner is gone. The place
    /// is freed as the ticket drops, after the lock is released.
    pub(crate) fn wait(self, end: Instant, alive: impl Fn() -> bool) -> Result<Answer, i32> {
        let c = self.calls;
        let i = self.id as usize % CALL_SLOTS;
        let mut g = lock(&c.slots);
        loop {
            if let Slot::Answered { id, errno, answer } = g.0[i] {
                if id == self.id {
                    return if errno == 0 { Ok(answer) } else { Err(errno) };
                }
            }
            let now = Instant::now();
            if now >= end || !alive() {
                return Err(libc::ETIMEDOUT);
            }
            g =
                c.cv.wait_timeout(g, (end - now).min(Duration::from_millis(100)))
                    .unwrap_or_else(|e| e.into_inner())
                    .0;
        }
    }
}

impl Drop for Ticket<'_> {
    fn drop(&mut self) {
        let mut g = lock(&self.calls.slots);
        let slot = &mut g.0[self.id as usize % CALL_SLOTS];
        if matches!(*slot, Slot::Waiting { id } | Slot::Answered { id, .. } if id == self.id) {
            *slot = Slot::Free;
        }
    }
}

/// The provider's state for XRC receive QPs opened across processes.
#[derive(Default)]
pub(crate) struct XrcOpen {
    /// Our calls waiting for their answers.
    calls: Calls,
    /// At a QP's owner: the QPs other processes hold, by device and number (no handle
    /// of ours may be left). A `BTreeMap`, as the provider's QP table, for memcheck.
    held: Mutex<BTreeMap<(usize, u32), Arc<Qp>>>,
    /// Our handles on other processes' QPs: their contexts, for the events.
    opened: Mutex<BTreeMap<u64, Arc<CtxCore>>>,
}

impl XrcOpen {
    /// At a QP's owner: other processes hold QP `qpn` of device `dev` no more.
    pub(crate) fn release(&self, dev: usize, qpn: u32) {
        lock(&self.held).remove(&(dev, qpn));
    }

    /// Registers (or, with `None`, forgets) handle `handle` of ours on a QP of another
    /// process, with its context.
    pub(crate) fn track(&self, handle: u64, ctx: Option<Arc<CtxCore>>) {
        let mut m = lock(&self.opened);
        match ctx {
            Some(c) => {
                m.insert(handle, c);
            }
            None => {
                m.remove(&handle);
            }
        }
    }

    /// An answer to one of our calls.
    pub(super) fn on_reply(&self, rec: &Record, payload: &[u8]) {
        self.calls.answer(rec.psn, rec.code as i32, payload);
    }

    /// An event for one of our handles on another process's QP.
    pub(super) fn on_event(&self, rec: &Record) {
        if let Some(ctx) = lock(&self.opened).get(&rec.remote_addr) {
            ctx.raise(rec.code, rec.remote_addr as usize);
        }
    }
}

/// Pushes `rec` with `payload`, retrying a full inbox for a moment.
fn push(inbox: &crate::shared::inbox::Inbox, rec: &Record, payload: &[u8]) -> Result<(), i32> {
    let end = Instant::now() + WAIT;
    loop {
        match inbox.push(rec, payload) {
            Ok(()) => return Ok(()),
            Err(PushError::Lost) => {}
            Err(PushError::Full) if Instant::now() < end => {
                std::thread::sleep(Duration::from_micros(50))
            }
            Err(PushError::Full) => return Err(libc::ETIMEDOUT),
        }
    }
}

/// Calls operation `op` on XRC receive QP `qpn` of device `dev`, owned by `owner`,
/// for handle `handle` of ours: the owner's errno, or its attributes.
#[allow(clippy::too_many_arguments)]
pub(crate) fn call(
    p: &'static Provider,
    owner: Owner,
    dev: usize,
    qpn: u32,
    op: u32,
    handle: u64,
    aux: u64,
    value: u32,
    payload: &[u8],
) -> Result<Answer, i32> {
    p.transport().start(p);
    let sh = p.transport().namespace().ok_or(libc::ENODEV)?;
    let inbox = sh.peer_inbox(owner).ok_or(libc::ENODEV)?;
    let ticket = p.xrc_open.calls.begin()?;
    let mut rec = Record::new(Kind::XrcCall);
    rec.code = op;
    rec.from_pid = sh.me.pid;
    rec.from_token = sh.me.token;
    rec.dst_qpn = qpn;
    rec.dst_dev = dev as u32;
    rec.psn = ticket.id();
    rec.remote_addr = handle;
    rec.aux = aux;
    rec.value = value;
    push(&inbox, &rec, payload)?;
    ticket.wait(Instant::now() + WAIT, || sh.is_alive(owner))
}

/// At the QP's owner: runs a call and answers it.
pub(super) fn on_call(p: &'static Provider, sh: &'static Shared, rec: &Record, payload: &[u8]) {
    let from = Owner {
        pid: rec.from_pid,
        token: rec.from_token,
    };
    let Some(inbox) = sh.peer_inbox(from) else {
        return;
    };
    let (dev, qpn) = (rec.dst_dev as usize, rec.dst_qpn);
    let q = p
        .find_qp_object(dev, qpn)
        .filter(|q| q.qp_type == IBV_QPT_XRC_RECV && q.tgt_handles.owner().is_none());
    let mut out = Answer::EMPTY;
    let errno = match (q, rec.code) {
        (None, _) => libc::EINVAL,
        (Some(q), OP_OPEN) => {
            let same = q
                .xrcd
                .as_ref()
                .is_some_and(|d| d.id == rec.aux && d.id >> 63 == 0);
            if same {
                q.tgt_handles.add_remote(from, rec.remote_addr);
                lock(&p.xrc_open.held).insert((dev, qpn), Arc::clone(&q));
                0
            } else {
                libc::EINVAL
            }
        }
        (Some(q), OP_MODIFY) => match decode_attr(payload) {
            Some(a) => {
                let port = &p.devices[q.dev];
                let gids = port.gids().len();
                match q.modify(&a, rec.value, gids, |ah| p.resolve_av(ah)) {
                    Ok(()) => 0,
                    Err(e) => e,
                }
            }
            None => libc::EINVAL,
        },
        (Some(q), OP_QUERY) => {
            out = Answer {
                len: ATTR_LEN,
                buf: encode_attr(&q.query()),
            };
            0
        }
        (Some(q), OP_CLOSE) => {
            let (remote, all) = q.tgt_handles.remove_remote(from, rec.remote_addr);
            if remote == 0 {
                p.xrc_open.release(dev, qpn);
            }
            if all == 0 {
                // The last hold: the QP goes.
                p.unregister_qp(q.qpn);
                q.destroy();
            }
            0
        }
        _ => libc::EINVAL,
    };
    let mut r = Record::new(Kind::XrcReply);
    r.code = errno as u32;
    r.from_pid = sh.me.pid;
    r.from_token = sh.me.token;
    r.psn = rec.psn;
    let _ = push(&inbox, &r, out.bytes());
}

/// The attributes of a modify or a query, as words.
pub(crate) fn encode_attr(a: &ibv_qp_attr) -> [u8; ATTR_LEN] {
    let ah = &a.ah_attr;
    let dgid = *vqp_sys::Gid::from_sys(&ah.grh.dgid).as_bytes();
    let words: [u32; ATTR_WORDS] = [
        a.qp_state,
        a.cur_qp_state,
        a.path_mtu,
        a.path_mig_state,
        a.qkey,
        a.rq_psn,
        a.sq_psn,
        a.dest_qp_num,
        a.qp_access_flags,
        u32::from(a.pkey_index),
        u32::from(a.max_rd_atomic),
        u32::from(a.max_dest_rd_atomic),
        u32::from(a.min_rnr_timer),
        u32::from(a.port_num),
        u32::from(a.timeout),
        u32::from(a.retry_cnt),
        u32::from(a.rnr_retry),
        u32::from(ah.dlid),
        u32::from(ah.sl),
        u32::from(ah.src_path_bits),
        u32::from(ah.static_rate),
        u32::from(ah.is_global),
        u32::from(ah.port_num),
        ah.grh.flow_label,
        u32::from(ah.grh.sgid_index),
        u32::from(ah.grh.hop_limit),
        u32::from(ah.grh.traffic_class),
    ];
    let mut out = [0u8; ATTR_LEN];
    for (o, w) in out.chunks_exact_mut(4).zip(words) {
        o.copy_from_slice(&w.to_le_bytes());
    }
    out[ATTR_WORDS * 4..].copy_from_slice(&dgid);
    out
}

/// The attributes [`encode_attr`] wrote; `None` for a payload of another size.
pub(crate) fn decode_attr(b: &[u8]) -> Option<ibv_qp_attr> {
    if b.len() != ATTR_LEN {
        return None;
    }
    let w = |i: usize| u32::from_le_bytes(b[i * 4..i * 4 + 4].try_into().unwrap_or_default());
    let mut a = ibv_qp_attr {
        qp_state: w(0),
        cur_qp_state: w(1),
        path_mtu: w(2),
        path_mig_state: w(3),
        qkey: w(4),
        rq_psn: w(5),
        sq_psn: w(6),
        dest_qp_num: w(7),
        qp_access_flags: w(8),
        pkey_index: w(9) as u16,
        max_rd_atomic: w(10) as u8,
        max_dest_rd_atomic: w(11) as u8,
        min_rnr_timer: w(12) as u8,
        port_num: w(13) as u8,
        timeout: w(14) as u8,
        retry_cnt: w(15) as u8,
        rnr_retry: w(16) as u8,
        ..Default::default()
    };
    let ah = &mut a.ah_attr;
    ah.dlid = w(17) as u16;
    ah.sl = w(18) as u8;
    ah.src_path_bits = w(19) as u8;
    ah.static_rate = w(20) as u8;
    ah.is_global = w(21) as u8;
    ah.port_num = w(22) as u8;
    ah.grh.flow_label = w(23);
    ah.grh.sgid_index = w(24) as u8;
    ah.grh.hop_limit = w(25) as u8;
    ah.grh.traffic_class = w(26) as u8;
    let mut gid = [0u8; 16];
    gid.copy_from_slice(&b[ATTR_WORDS * 4..]);
    ah.grh.dgid = ibv_gid { raw: gid };
    Some(a)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attributes_survive_the_trip() {
        let mut a = ibv_qp_attr {
            qp_state: IBV_QPS_RTR,
            dest_qp_num: 0x12345,
            min_rnr_timer: 12,
            qp_access_flags: IBV_ACCESS_REMOTE_WRITE,
            ..Default::default()
        };
        a.ah_attr.dlid = 7;
        a.ah_attr.grh.dgid = ibv_gid { raw: [3; 16] };
        let b = decode_attr(&encode_attr(&a)).unwrap();
        assert_eq!(encode_attr(&b), encode_attr(&a));
        assert_eq!(
            (b.dest_qp_num, b.ah_attr.dlid, b.min_rnr_timer),
            (0x12345, 7, 12)
        );
        assert!(decode_attr(&[0; 8]).is_none());
    }

    #[test]
    fn a_call_gets_its_own_answer() {
        let c = Calls::default();
        let t = c.begin().unwrap();
        let other = c.begin().unwrap();
        c.answer(other.id(), libc::EINVAL, &[]);
        c.answer(t.id(), 0, &[1, 2, 3]);
        let end = Instant::now() + Duration::from_secs(1);
        assert_eq!(t.wait(end, || true).unwrap().bytes(), &[1, 2, 3]);
        assert_eq!(other.wait(end, || true).err(), Some(libc::EINVAL));
    }

    #[test]
    fn a_full_table_is_enomem_and_a_freed_place_is_taken_again() {
        let c = Calls::default();
        let mut held: Vec<Ticket> = (0..CALL_SLOTS).map(|_| c.begin().unwrap()).collect();
        assert_eq!(c.begin().err(), Some(libc::ENOMEM));
        let gone = held.pop().unwrap();
        let place = gone.id() as usize % CALL_SLOTS;
        drop(gone);
        let again = c.begin().unwrap();
        assert_eq!(again.id() as usize % CALL_SLOTS, place);
        assert_eq!(c.begin().err(), Some(libc::ENOMEM));
    }

    #[test]
    fn a_late_answer_is_not_taken_for_the_next_call_in_its_place() {
        let c = Calls::default();
        let first = c.begin().unwrap();
        let late = first.id();
        // The caller gave up (its wait ended).
        assert_eq!(
            first.wait(Instant::now(), || true).err(),
            Some(libc::ETIMEDOUT)
        );
        let next = c.begin().unwrap();
        assert_eq!(next.id() as usize % CALL_SLOTS, late as usize % CALL_SLOTS);
        assert_ne!(next.id(), late);
        c.answer(late, 0, &[9]);
        assert_eq!(
            next.wait(Instant::now() + Duration::from_millis(50), || true)
                .err(),
            Some(libc::ETIMEDOUT)
        );
    }

    #[test]
    fn an_oversized_answer_is_eproto_and_an_unknown_number_is_ignored() {
        let c = Calls::default();
        let t = c.begin().unwrap();
        c.answer(t.id().wrapping_add(CALL_SLOTS as u32), 0, &[]);
        c.answer(t.id(), 0, &[0; ATTR_LEN + 1]);
        let end = Instant::now() + Duration::from_secs(1);
        assert_eq!(t.wait(end, || true).err(), Some(libc::EPROTO));
    }

    #[test]
    fn a_dead_owner_ends_the_wait() {
        let c = Calls::default();
        let t = c.begin().unwrap();
        let end = Instant::now() + Duration::from_secs(30);
        let start = Instant::now();
        assert_eq!(t.wait(end, || false).err(), Some(libc::ETIMEDOUT));
        assert!(start.elapsed() < Duration::from_secs(1));
    }
}
