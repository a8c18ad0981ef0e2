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

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

use vqp_sys::*;

use super::Provider;
use crate::os::lock;
use crate::shared::inbox::{Kind, PushError, Record};
use crate::shared::{Owner, Shared};

/// Operations of a call.
pub(crate) const OP_OPEN: u32 = 1;
pub(crate) const OP_MODIFY: u32 = 2;
pub(crate) const OP_QUERY: u32 = 3;
pub(crate) const OP_CLOSE: u32 = 4;

/// How long a caller waits for the owner's answer.
const WAIT: Duration = Duration::from_secs(5);

/// Answers that came back, by call number, for the callers waiting on them.
#[derive(Default)]
struct Calls {
    next: AtomicU32,
    done: Mutex<HashMap<u32, (i32, Vec<u8>)>>,
    cv: Condvar,
}

fn calls() -> &'static Calls {
    static CALLS: OnceLock<Calls> = OnceLock::new();
    CALLS.get_or_init(Calls::default)
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
) -> Result<Vec<u8>, i32> {
    p.transport().start(p);
    let sh = p.transport().namespace().ok_or(libc::ENODEV)?;
    let inbox = sh.peer_inbox(owner).ok_or(libc::ENODEV)?;
    let c = calls();
    let id = c.next.fetch_add(1, Ordering::Relaxed);
    let mut rec = Record::new(Kind::XrcCall);
    rec.code = op;
    rec.from_pid = sh.me.pid;
    rec.from_token = sh.me.token;
    rec.dst_qpn = qpn;
    rec.dst_dev = dev as u32;
    rec.psn = id;
    rec.remote_addr = handle;
    rec.aux = aux;
    rec.value = value;
    push(&inbox, &rec, payload)?;
    let end = Instant::now() + WAIT;
    let mut done = lock(&c.done);
    loop {
        if let Some((e, data)) = done.remove(&id) {
            return if e == 0 { Ok(data) } else { Err(e) };
        }
        let now = Instant::now();
        if now >= end || !sh.is_alive(owner) {
            return Err(libc::ETIMEDOUT);
        }
        done =
            c.cv.wait_timeout(done, (end - now).min(Duration::from_millis(100)))
                .unwrap_or_else(|e| e.into_inner())
                .0;
    }
}

/// An answer to one of our calls.
pub(super) fn on_reply(rec: &Record, payload: &[u8]) {
    let c = calls();
    lock(&c.done).insert(rec.psn, (rec.code as i32, payload.to_vec()));
    c.cv.notify_all();
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
    let mut out = Vec::new();
    let errno = match (q, rec.code) {
        (None, _) => libc::EINVAL,
        (Some(q), OP_OPEN) => {
            let same = q
                .xrcd
                .as_ref()
                .is_some_and(|d| d.id == rec.aux && d.id >> 63 == 0);
            if same {
                q.tgt_handles.add_remote(from, rec.remote_addr);
                lock(held()).insert((dev, qpn), Arc::clone(&q));
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
            out = encode_attr(&q.query());
            0
        }
        (Some(q), OP_CLOSE) => {
            let (remote, all) = q.tgt_handles.remove_remote(from, rec.remote_addr);
            if remote == 0 {
                release(dev, qpn);
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
    let _ = push(&inbox, &r, &out);
}

/// QPs by device and number.
type QpMap = HashMap<(usize, u32), Arc<crate::qp::Qp>>;

/// At a QP's owner: the QPs other processes hold (no handle of ours may be left).
fn held() -> &'static Mutex<QpMap> {
    static HELD: OnceLock<Mutex<QpMap>> = OnceLock::new();
    HELD.get_or_init(Default::default)
}

/// At a QP's owner: other processes hold QP `qpn` of device `dev` no more.
pub(crate) fn release(dev: usize, qpn: u32) {
    lock(held()).remove(&(dev, qpn));
}

/// Handles of ours on other processes' QPs: their contexts, for the events.
fn opened() -> &'static Mutex<HashMap<u64, Arc<crate::cq::CtxCore>>> {
    static OPENED: OnceLock<Mutex<HashMap<u64, Arc<crate::cq::CtxCore>>>> = OnceLock::new();
    OPENED.get_or_init(Default::default)
}

/// Registers (or, with `None`, forgets) handle `handle` of ours on a QP of another
/// process, with its context.
pub(crate) fn track(handle: u64, ctx: Option<Arc<crate::cq::CtxCore>>) {
    let mut m = lock(opened());
    match ctx {
        Some(c) => {
            m.insert(handle, c);
        }
        None => {
            m.remove(&handle);
        }
    }
}

/// An event for one of our handles on another process's QP.
pub(super) fn on_event(rec: &Record) {
    if let Some(ctx) = lock(opened()).get(&rec.remote_addr) {
        ctx.raise(rec.code, rec.remote_addr as usize);
    }
}

/// The attributes of a modify or a query, as words.
pub(crate) fn encode_attr(a: &ibv_qp_attr) -> Vec<u8> {
    let ah = &a.ah_attr;
    let dgid = *vqp_sys::Gid::from_sys(&ah.grh.dgid).as_bytes();
    let words = [
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
    let mut v: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    v.extend_from_slice(&dgid);
    v
}

/// The attributes [`encode_attr`] wrote; `None` for a payload of another size.
pub(crate) fn decode_attr(b: &[u8]) -> Option<ibv_qp_attr> {
    const WORDS: usize = 27;
    if b.len() != WORDS * 4 + 16 {
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
    gid.copy_from_slice(&b[WORDS * 4..]);
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
}
