//! The C objects — event channels, cm ids, events — and the operations on them that
//! the `rdma_*` functions ([`crate::capi`]) run. Each returns an errno value on failure.
//!
//! An object is a Rust struct whose first field is the C struct, so the pointer the
//! program holds is the object's. The C struct's fields are written only here, in the
//! program's own calls (the agent thread changes only [`Conn`]'s state): route and
//! device when an address is resolved, the new id when a CONNECT_REQUEST is taken, the
//! QP when it is created.

use core::ffi::{c_int, c_void};
use core::ptr;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use vqp_sys::*;

use crate::abi::{self, event, *};
use crate::addr;
use crate::agent::{self, agent, reason, SendError};
use crate::conn::{Conn, Listen, Phase};
use crate::qp;
use crate::queue::{Queue, What};
use crate::verbs::{self, Device, Place};
use crate::wire::{self, Body, Kind, Private};

use crate::agent::MAX_RD_ATOMIC;

/// An event channel.
#[repr(C)]
pub struct Channel {
    /// What the program sees.
    pub c: rdma_event_channel,
    /// Its queue.
    pub queue: Arc<Queue>,
}

/// A cm id.
#[repr(C)]
pub struct Id {
    /// What the program sees.
    pub c: rdma_cm_id,
    /// The connection state shared with the agent.
    pub conn: Arc<Conn>,
    /// The path record `c.route.path_rec` points to once the route is resolved.
    path: ibv_sa_path_rec,
    /// The channel of an id created without one (a synchronous id): its operations
    /// wait for their own events.
    own_channel: *mut Channel,
    /// CQs (and their completion channels) `rdma_create_qp` made for the id.
    own_cqs: bool,
    /// The receive CQ (and its channel) `rdma_create_srq` made for an XRC SRQ.
    own_srq_cq: bool,
    /// QP attributes `rdma_create_ep` kept for a passive id's requests.
    ep_attr: Option<(ibv_qp_init_attr, *mut ibv_pd)>,
}

/// An event the program holds until `rdma_ack_cm_event`.
#[repr(C)]
pub struct Event {
    /// What the program sees.
    pub c: rdma_cm_event,
    private: [u8; 256],
    conn: Arc<Conn>,
}

/// Every channel handed out and not yet destroyed, by address, with its queue: a
/// channel is used through this table, never by reading the program's pointer, so a
/// channel destroyed already is `EINVAL` rather than a read of freed memory. Programs
/// do use them after destroying them: rping's CM thread calls `rdma_get_cm_event`
/// again once its main thread has destroyed the channel, and perftest 4.5's retry
/// path destroys its channel twice (with librdmacm the first reads a stale
/// descriptor from freed memory and fails, the second is glibc's double free).
static LIVE_CHANNELS: std::sync::Mutex<std::collections::BTreeMap<usize, Arc<Queue>>> =
    std::sync::Mutex::new(std::collections::BTreeMap::new());

fn live_channels() -> std::sync::MutexGuard<'static, std::collections::BTreeMap<usize, Arc<Queue>>>
{
    LIVE_CHANNELS.lock().unwrap_or_else(|e| e.into_inner())
}

/// `rdma_create_event_channel`.
pub fn create_channel() -> Result<*mut Channel, i32> {
    agent()?;
    let queue = Queue::new().map_err(|e| e.raw_os_error().unwrap_or(libc::EMFILE))?;
    let ch = Box::into_raw(Box::new(Channel {
        c: rdma_event_channel { fd: queue.fd() },
        queue: Arc::clone(&queue),
    }));
    live_channels().insert(ch as usize, queue);
    Ok(ch)
}

/// `rdma_destroy_event_channel`: a pointer that is not a live channel of this library
/// (null, destroyed already) is left alone.
///
/// # Safety
/// None beyond a pointer's: the table decides whether `ch` is ours to free (an
/// `unsafe fn` because it frees what a raw pointer names).
pub unsafe fn destroy_channel(ch: *mut Channel) {
    if live_channels().remove(&(ch as usize)).is_some() {
        // SAFETY: registered by `create_channel` until now: a live `Box<Channel>`,
        // ours to free (taken out of the table, nobody else frees it).
        drop(unsafe { Box::from_raw(ch) });
    }
}

/// The queue of the channel behind a C pointer: `EINVAL` unless it is a live channel
/// of this library.
pub fn queue_of(ch: *mut rdma_event_channel) -> Result<Arc<Queue>, i32> {
    live_channels()
        .get(&(ch as usize))
        .cloned()
        .ok_or(libc::EINVAL)
}

/// Every id handed out and not yet destroyed, by address: a pointer that is not one
/// of them (null, destroyed already, never ours) is `EINVAL` rather than a crash. A
/// `BTreeSet`, whose nodes memcheck sees referenced from their start.
static LIVE_IDS: std::sync::Mutex<std::collections::BTreeSet<usize>> =
    std::sync::Mutex::new(std::collections::BTreeSet::new());

fn live_ids() -> std::sync::MutexGuard<'static, std::collections::BTreeSet<usize>> {
    LIVE_IDS.lock().unwrap_or_else(|e| e.into_inner())
}

/// The id behind a C pointer: `EINVAL` unless it is a live id of this library.
///
/// # Safety
/// The program does not use the id from another thread during the call, nor destroys
/// it (as librdmacm requires).
pub unsafe fn id<'a>(id: *mut rdma_cm_id) -> Result<&'a mut Id, i32> {
    if !live_ids().contains(&(id as usize)) {
        return Err(libc::EINVAL);
    }
    // SAFETY: a live `Id` (registered by `new_id` until `destroy_id` frees it) starts
    // with its `rdma_cm_id`; the contract keeps other users away during the call.
    unsafe { id.cast::<Id>().as_mut() }.ok_or(libc::EINVAL)
}

fn qp_type_of(ps: u32) -> Option<u32> {
    match ps {
        RDMA_PS_TCP | RDMA_PS_IB => Some(IBV_QPT_RC),
        RDMA_PS_UDP | RDMA_PS_IPOIB => Some(IBV_QPT_UD),
        _ => None,
    }
}

/// Whether an id of port space `ps` may have QPs of `qp_type`: the connected types (RC
/// and XRC's two halves, as `rdma_create_ep` gives them from `ai_qp_type`) in the TCP
/// and IB spaces, UD in the UDP and IPoIB ones.
fn qp_type_fits(ps: u32, qp_type: u32) -> bool {
    match ps {
        RDMA_PS_TCP | RDMA_PS_IB => {
            matches!(qp_type, IBV_QPT_RC | IBV_QPT_XRC_SEND | IBV_QPT_XRC_RECV)
        }
        RDMA_PS_UDP | RDMA_PS_IPOIB => qp_type == IBV_QPT_UD,
        _ => false,
    }
}

/// Whether `qp_type` is an XRC receive QP, which lives in an XRC domain, has no send
/// queue and takes its receives from the XRC SRQ a request names.
pub fn is_xrc_recv(qp_type: u32) -> bool {
    qp_type == IBV_QPT_XRC_RECV
}

fn new_id(conn: Arc<Conn>, ch: *mut Channel, context: *mut c_void, qp_type: u32) -> *mut Id {
    // SAFETY: every field of `rdma_cm_id` is a pointer, an integer or a plain struct of
    // them, for which all-zero is valid (null, 0, no address).
    let mut c: rdma_cm_id = unsafe { core::mem::zeroed() };
    c.channel = ch.cast();
    c.context = context;
    c.ps = conn.ps;
    c.qp_type = qp_type;
    let id = Box::into_raw(Box::new(Id {
        c,
        conn: conn.clone(),
        path: ibv_sa_path_rec::default(),
        own_channel: ptr::null_mut(),
        own_cqs: false,
        own_srq_cq: false,
        ep_attr: None,
    }));
    conn.c_id.store(id as usize, Ordering::Release);
    live_ids().insert(id as usize);
    id
}

/// `rdma_create_id`: an id of port space `ps`, whose QPs are of the space's type
/// (RC, or UD).
///
/// # Safety
/// `ch` is null or a live channel of this library.
pub unsafe fn create_id(
    ch: *mut rdma_event_channel,
    context: *mut c_void,
    ps: u32,
) -> Result<*mut Id, i32> {
    let qp_type = qp_type_of(ps).ok_or(libc::EINVAL)?;
    // SAFETY: forwarded.
    unsafe { create_id_of(ch, context, ps, qp_type) }
}

/// An id of port space `ps` whose QPs are of `qp_type` (rdma-core's `rdma_create_id2`,
/// which `rdma_create_ep` uses with the address's `ai_qp_type`): `EINVAL` for a type
/// the space does not carry.
///
/// # Safety
/// `ch` is null or a live channel of this library.
pub unsafe fn create_id_of(
    ch: *mut rdma_event_channel,
    context: *mut c_void,
    ps: u32,
    qp_type: u32,
) -> Result<*mut Id, i32> {
    if !qp_type_fits(ps, qp_type) {
        return Err(libc::EINVAL);
    }
    let a = agent()?;
    let (chan, own) = if ch.is_null() {
        let own = create_channel()?;
        (own, own)
    } else {
        (ch.cast::<Channel>(), ptr::null_mut())
    };
    let queue = queue_of(chan.cast())?;
    let conn = Conn::new(a.next_num(), ps, qp_type, queue);
    a.register(&conn);
    let id = new_id(conn, chan, context, qp_type);
    // SAFETY: `id` was just made.
    unsafe { (*id).own_channel = own };
    Ok(id)
}

/// `rdma_destroy_qp`: the QP, and the CQs `rdma_create_qp` made for it.
pub fn destroy_qp_of(id: &mut Id) {
    qp::destroy(&mut id.c, &mut id.own_cqs);
}

/// `rdma_create_srq_ex` (and `rdma_create_srq`, with the SRQ type of the id's QP
/// type): an SRQ on the id's device, with the id's PD when none is named; an XRC SRQ
/// (`IBV_SRQT_XRC`) also gets the device's XRC domain and, when none is named, a CQ
/// (with a completion channel) of its own that becomes the id's receive CQ — as
/// rdma-core's `rdma_create_srq_ex` does, so that `rdma_get_recv_comp` reaps the
/// receives of an XRC receive id. `EINVAL` without `IBV_SRQ_INIT_ATTR_TYPE` or before
/// the id has a device. (A second SRQ replaces the id's first in `id->srq`, as with
/// rdma-core; the first stays the program's to destroy.)
///
/// # Safety
/// `a`'s objects are null or live objects of the id's device.
pub unsafe fn create_srq(id: &mut Id, a: &mut ibv_srq_init_attr_ex) -> Result<(), i32> {
    if a.comp_mask & IBV_SRQ_INIT_ATTR_TYPE == 0 || id.c.verbs.is_null() {
        return Err(libc::EINVAL);
    }
    let t = verbs::table()?;
    if a.comp_mask & IBV_SRQ_INIT_ATTR_PD == 0 || a.pd.is_null() {
        a.pd = if id.c.pd.is_null() {
            verbs::default_pd(id.c.verbs)?
        } else {
            id.c.pd
        };
        a.comp_mask |= IBV_SRQ_INIT_ATTR_PD;
    }
    // SAFETY: a live PD (the caller's, or the id's).
    if unsafe { (*a.pd).context } != id.c.verbs {
        return Err(libc::EINVAL);
    }
    let srq = if a.srq_type == IBV_SRQT_BASIC
        && a.comp_mask & !IBV_SRQ_INIT_ATTR_PD == IBV_SRQ_INIT_ATTR_TYPE
    {
        let mut basic = ibv_srq_init_attr {
            srq_context: a.srq_context,
            attr: a.attr,
        };
        // SAFETY: a live PD of the id's device and a valid attribute struct.
        let srq = unsafe { (t.create_srq)(a.pd, &mut basic) };
        if srq.is_null() {
            return Err(std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::ENOMEM));
        }
        a.attr = basic.attr;
        srq
    } else {
        let mut made_cq = false;
        if a.srq_type == IBV_SRQT_XRC {
            if a.comp_mask & IBV_SRQ_INIT_ATTR_XRCD == 0 || a.xrcd.is_null() {
                a.xrcd = verbs::xrcd(id.c.verbs)?;
            }
            if a.comp_mask & IBV_SRQ_INIT_ATTR_CQ == 0 || a.cq.is_null() {
                if id.c.recv_cq.is_null() {
                    // SAFETY: the id's open context.
                    let ch = unsafe { (t.create_comp_channel)(id.c.verbs) };
                    if ch.is_null() {
                        return Err(libc::ENOMEM);
                    }
                    let depth = a.attr.max_wr.max(1) as c_int;
                    // SAFETY: as above; `ch` was just made on it.
                    let cq =
                        unsafe { (t.create_cq)(id.c.verbs, depth, (id as *mut Id).cast(), ch, 0) };
                    if cq.is_null() {
                        // SAFETY: the channel just made, used by nothing.
                        unsafe { (t.destroy_comp_channel)(ch) };
                        return Err(libc::ENOMEM);
                    }
                    id.c.recv_cq = cq;
                    id.c.recv_cq_channel = ch;
                    made_cq = true;
                }
                a.cq = id.c.recv_cq;
            }
            a.comp_mask |= IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ;
        }
        // SAFETY: the id's open context; `a` names objects of its device.
        match unsafe { verbs::create_srq_ex(id.c.verbs, a) } {
            Ok(srq) => {
                id.own_srq_cq |= made_cq;
                srq
            }
            Err(e) => {
                if made_cq {
                    id.own_srq_cq = true;
                    destroy_srq_cq(id);
                }
                return Err(e);
            }
        }
    };
    if id.c.pd.is_null() {
        id.c.pd = a.pd;
    }
    id.c.srq = srq;
    Ok(())
}

fn destroy_srq_cq(id: &mut Id) {
    if !id.own_srq_cq {
        return;
    }
    id.own_srq_cq = false;
    let Ok(t) = verbs::table() else { return };
    // SAFETY: the CQ and channel `create_srq` made, destroyed once (the CQ first).
    unsafe {
        if !id.c.recv_cq.is_null() {
            (t.destroy_cq)(id.c.recv_cq);
        }
        if !id.c.recv_cq_channel.is_null() {
            (t.destroy_comp_channel)(id.c.recv_cq_channel);
        }
    }
    id.c.recv_cq = ptr::null_mut();
    id.c.recv_cq_channel = ptr::null_mut();
}

/// `rdma_destroy_srq`: the id's SRQ, and the CQ `rdma_create_srq` made for it.
pub fn destroy_srq(id: &mut Id) {
    if !id.c.srq.is_null() {
        if let Ok(t) = verbs::table() {
            // SAFETY: the id's SRQ, not used after this.
            unsafe { (t.destroy_srq)(id.c.srq) };
        }
        id.c.srq = ptr::null_mut();
    }
    destroy_srq_cq(id);
}

/// `rdma_create_qp`.
///
/// # Safety
/// `pd` is null or a live PD; `attr` points to a valid `ibv_qp_init_attr`.
pub unsafe fn create_qp(
    id: &mut Id,
    pd: *mut ibv_pd,
    attr: *mut ibv_qp_init_attr,
) -> Result<(), i32> {
    // SAFETY: forwarded from the caller.
    unsafe { create_qp_in(id, pd, ptr::null_mut(), attr) }
}

/// `rdma_create_qp_ex`: as [`create_qp`], an XRC receive QP in `xrcd` when one is
/// given (else the device's domain).
///
/// # Safety
/// As [`create_qp`]; `xrcd` is null or a live XRC domain of the id's device.
pub unsafe fn create_qp_in(
    id: &mut Id,
    pd: *mut ibv_pd,
    xrcd: *mut ibv_xrcd,
    attr: *mut ibv_qp_init_attr,
) -> Result<(), i32> {
    // SAFETY: forwarded from the caller.
    unsafe { qp::create(&id.conn, &mut id.c, &mut id.own_cqs, pd, xrcd, attr) }
}

/// `rdma_init_qp_attr`: the attributes for moving the id's QP to `state`.
pub fn qp_attr(id: &Id, state: u32) -> Result<(ibv_qp_attr, u32), i32> {
    qp::attr(&id.conn, &id.c, state)
}

fn connect_qp(id: &Id) -> Result<(), i32> {
    qp::connect(&id.conn, &id.c)
}

fn qp_to_error(id: &Id) {
    qp::to_error(&id.c);
}

/// `rdma_destroy_id`: tells the peer (DREQ when connected, REJ when a request was not
/// answered), waits until every event handed out for it was acknowledged, frees it.
///
/// # Safety
/// `idp` came from this library, is alive, and is not used after this call.
pub unsafe fn destroy_id(idp: *mut Id) -> Result<(), i32> {
    // SAFETY: the caller's contract; `id` checks the pointer is a live id.
    let id = unsafe { id(idp.cast()) }?;
    let a = agent()?;
    let conn = id.conn.clone();
    if !id.c.event.is_null() {
        // SAFETY: a synchronous id's own event, not yet acknowledged.
        unsafe { ack(id.c.event.cast()) };
        id.c.event = ptr::null_mut();
    }
    conn.destroyed.store(true, Ordering::Release);
    let (peer, phase, parent) = {
        let mut s = conn.lock();
        let r = (s.peer, s.phase, s.parent.clone());
        s.phase = Phase::Failed;
        s.deadline = None;
        s.timewait = None;
        r
    };
    if let Some(p) = peer {
        match phase {
            Phase::Connected | Phase::RepSent | Phase::RepRcvd => {
                let _ = a.tell(&conn, &p, Kind::Dreq);
            }
            Phase::ReqRcvd => {
                let rej = a.message(
                    Kind::Rej,
                    conn.num,
                    p.comm,
                    Body::Rej {
                        reason: reason::CONSUMER,
                        private: Private::EMPTY,
                    },
                );
                a.send_brief(p.name.as_str(), &rej);
            }
            _ => {}
        }
    }
    if phase == Phase::ReqRcvd {
        release_backlog(parent.as_ref());
    }
    a.unregister(&conn);
    conn.wait_acked();
    // Reports queued and never taken: a CONNECT_REQUEST's new id is rejected.
    let queue = conn.lock().queue.clone();
    for p in queue.forget(&conn) {
        if let What::Request(child) = p.what {
            reject_unclaimed(&child);
        }
    }
    destroy_qp_of(id);
    live_ids().remove(&(idp as usize));
    // SAFETY: `idp` came from `Box::into_raw` in `new_id`; nothing refers to it now.
    let id = unsafe { Box::from_raw(idp) };
    if !id.own_channel.is_null() {
        // SAFETY: the synchronous id's own channel, used by nothing else.
        unsafe { destroy_channel(id.own_channel) };
    }
    Ok(())
}

/// A request whose listener went away before the program saw it.
fn reject_unclaimed(child: &Arc<Conn>) {
    if let Ok(a) = agent() {
        let peer = child.lock().peer;
        if let Some(p) = peer {
            let rej = a.message(
                Kind::Rej,
                child.num,
                p.comm,
                Body::Rej {
                    reason: reason::INVALID_SERVICE_ID,
                    private: Private::EMPTY,
                },
            );
            a.send_brief(p.name.as_str(), &rej);
        }
        a.unregister(child);
    }
}

fn release_backlog(parent: Option<&Arc<Conn>>) {
    if let Some(l) = parent {
        if let Some(info) = l.lock().listen.as_mut() {
            info.pending = info.pending.saturating_sub(1);
        }
    }
}

/// Sets the id's device and port (where its local address lives), its addresses, and
/// the GIDs of both ends (`dgid`: the remote address's, when it is given), as the
/// kernel's `ucma_query_route` fills `route.addr.addr.ibaddr`.
fn set_route_addr(
    id: &mut Id,
    at: &Place,
    local: &SocketAddr,
    remote: Option<(&SocketAddr, [u8; 16])>,
) {
    id.c.verbs = at.dev.context;
    id.c.port_num = 1;
    id.c.route.addr.src = addr::to_storage(local);
    let mut dgid = at.gid;
    if let Some((r, g)) = remote {
        id.c.route.addr.dst = addr::to_storage(r);
        dgid = g;
    }
    id.c.route.addr.ibaddr.sgid = ibv_gid { raw: at.gid };
    id.c.route.addr.ibaddr.dgid = ibv_gid { raw: dgid };
    id.c.route.addr.ibaddr.pkey = 0xffffu16.to_be();
}

/// The id's own GID (its `sgid`: the GID of its local address).
pub fn sgid_of(c: &rdma_cm_id) -> [u8; 16] {
    // SAFETY: every bit pattern is a valid `raw` view of the union.
    unsafe { c.route.addr.ibaddr.sgid.raw }
}

/// `rdma_bind_addr`: records the address and, for a port, holds it (the listener
/// socket) — `EADDRINUSE` when another live id holds it. Port 0 picks a free one.
///
/// # Safety
/// `sa` is a socket address of its family's length.
pub unsafe fn bind_addr(id: &mut Id, sa: *const libc::sockaddr) -> Result<(), i32> {
    // SAFETY: forwarded from the caller.
    let mut local = unsafe { addr::from_c(sa) }?;
    if !local.ip().is_unspecified() && !addr::is_local(local.ip()) {
        return Err(libc::EADDRNOTAVAIL);
    }
    let conn = id.conn.clone();
    {
        let s = conn.lock();
        if s.phase != Phase::Idle || s.local.is_some() {
            return Err(libc::EINVAL);
        }
    }
    let a = agent()?;
    let fixed = local.port() != 0;
    let mut tries = 0;
    let socket = loop {
        if !fixed {
            local.set_port(addr::ephemeral_port());
        }
        let name = addr::bound_name(conn.ps, &local);
        match a.bind_listener(&conn, &name) {
            Ok(()) => break name,
            Err(libc::EADDRINUSE) if !fixed && tries < 64 => tries += 1,
            Err(e) => return Err(e),
        }
    };
    {
        let mut s = conn.lock();
        s.local = Some(local);
        s.listen = Some(Listen {
            socket,
            listening: None,
            active: false,
            backlog: 0,
            pending: 0,
        });
    }
    if !local.ip().is_unspecified() {
        set_route_addr(id, &verbs::place(local.ip())?, &local, None);
    } else {
        id.c.route.addr.src = addr::to_storage(&local);
    }
    Ok(())
}

/// Waits for a synchronous id's next event, as rdma-core's `ucma_complete`: the event
/// stays in `id->event` until the next one; a failure status becomes the errno.
fn complete(id: &mut Id) -> Result<(), i32> {
    if id.own_channel.is_null() {
        return Ok(());
    }
    if !id.c.event.is_null() {
        // SAFETY: the id's own previous event, not yet acknowledged.
        unsafe { ack(id.c.event.cast()) };
        id.c.event = ptr::null_mut();
    }
    let ev = get_event(queue_of(id.own_channel.cast())?)?;
    id.c.event = ev.cast();
    // SAFETY: just returned by get_event.
    let e = unsafe { &(*ev).c };
    if e.status != 0 {
        return Err(if e.event == event::REJECTED {
            libc::ECONNREFUSED
        } else {
            e.status.abs()
        });
    }
    Ok(())
}

/// `rdma_resolve_addr`: a destination of this machine resolves at once to soft device
/// 0 (see [`crate::addr`]); any other gets ADDR_ERROR after `timeout_ms`.
///
/// # Safety
/// `src` is null or, like `dst`, a socket address of its family's length.
pub unsafe fn resolve_addr(
    id: &mut Id,
    src: *const libc::sockaddr,
    dst: *const libc::sockaddr,
    timeout_ms: c_int,
) -> Result<(), i32> {
    // SAFETY: forwarded from the caller.
    let remote = unsafe { addr::from_c(dst) }?;
    if !src.is_null() && id.conn.lock().local.is_none() {
        // SAFETY: forwarded from the caller.
        unsafe { bind_addr(id, src) }?;
    }
    let conn = id.conn.clone();
    // No device at all is ENODEV before anything changes.
    verbs::devices()?;
    let mut s = conn.lock();
    if !matches!(s.phase, Phase::Idle | Phase::AddrResolved) {
        return Err(libc::EINVAL);
    }
    let local = match s.local {
        Some(l) if !l.ip().is_unspecified() => l,
        other => {
            let port = other.map_or(0, |l| l.port());
            let port = if port == 0 {
                addr::ephemeral_port()
            } else {
                port
            };
            // The source is the destination itself when it is this machine's;
            // loopback of the destination's family otherwise.
            let ip = if addr::is_local(remote.ip()) {
                remote.ip()
            } else {
                match remote.ip() {
                    IpAddr::V4(_) => Ipv4Addr::LOCALHOST.into(),
                    IpAddr::V6(_) => Ipv6Addr::LOCALHOST.into(),
                }
            };
            SocketAddr::new(ip, port)
        }
    };
    s.local = Some(local);
    s.remote = Some(remote);
    if addr::is_local(remote.ip()) {
        drop(s);
        let (at, there) = match (verbs::place(local.ip()), verbs::place(remote.ip())) {
            (Ok(a), Ok(b)) => (a, b),
            (Err(e), _) | (_, Err(e)) => {
                conn.lock().remote = None;
                return Err(e);
            }
        };
        // The id's fields first: the program may act on the event from another
        // thread as soon as it is queued.
        set_route_addr(id, &at, &local, Some((&remote, there.gid)));
        let mut s = conn.lock();
        s.phase = Phase::AddrResolved;
        conn.report(&s, What::AddrResolved);
    } else {
        s.phase = Phase::AddrResolving;
        s.deadline = Some(Instant::now() + Duration::from_millis(timeout_ms.max(0) as u64));
        drop(s);
        agent()?.kick();
        id.c.route.addr.dst = addr::to_storage(&remote);
    }
    complete(id)
}

/// `rdma_resolve_route`: the path record from the id's port 1 (its GID and LID) to
/// the port the destination address lives on (see [`verbs::place`]).
pub fn resolve_route(id: &mut Id, _timeout_ms: c_int) -> Result<(), i32> {
    let conn = id.conn.clone();
    let dev = verbs::by_context(id.c.verbs).ok_or(libc::EINVAL)?;
    let remote = {
        let s = conn.lock();
        if !matches!(s.phase, Phase::AddrResolved | Phase::RouteResolved) {
            return Err(libc::EINVAL);
        }
        s.remote.ok_or(libc::EINVAL)?
    };
    let there = verbs::place(remote.ip())?;
    id.path = ibv_sa_path_rec {
        // SAFETY: every bit pattern is a valid `raw` view of the union.
        dgid: unsafe { id.c.route.addr.ibaddr.dgid.raw },
        sgid: sgid_of(&id.c),
        dlid: there.dev.lid.to_be(),
        slid: dev.lid.to_be(),
        reversible: 1,
        numb_path: 1,
        pkey: 0xffffu16.to_be(),
        mtu_selector: 2,
        mtu: dev.mtu.min(there.dev.mtu),
        rate_selector: 2,
        packet_life_time_selector: 2,
        packet_life_time: qp::ACK_TIMEOUT - 1,
        ..ibv_sa_path_rec::default()
    };
    id.c.route.path_rec = &mut id.path;
    id.c.route.num_paths = 1;
    {
        let mut s = conn.lock();
        s.phase = Phase::RouteResolved;
        conn.report(&s, What::RouteResolved);
    }
    complete(id)
}

/// Connection parameters as the program gave them, or rdma-core's defaults.
///
/// # Safety
/// `p` is null or a valid `rdma_conn_param` whose private data is as long as it says.
unsafe fn params(
    p: *const rdma_conn_param,
    limit: usize,
) -> Result<(rdma_conn_param, Private), i32> {
    // SAFETY: the caller's contract.
    match unsafe { p.as_ref() } {
        None => Ok((
            rdma_conn_param {
                private_data: ptr::null(),
                private_data_len: 0,
                responder_resources: RDMA_MAX_RESP_RES,
                initiator_depth: RDMA_MAX_INIT_DEPTH,
                flow_control: 1,
                retry_count: 7,
                rnr_retry_count: 7,
                srq: 0,
                qp_num: 0,
            },
            Private::EMPTY,
        )),
        Some(p) => {
            let n = usize::from(p.private_data_len);
            if n > limit || (n > 0 && p.private_data.is_null()) {
                return Err(libc::EINVAL);
            }
            let data = if n == 0 {
                &[][..]
            } else {
                // SAFETY: the program's private data, `n` bytes long.
                unsafe { core::slice::from_raw_parts(p.private_data.cast::<u8>(), n) }
            };
            Ok((*p, Private::new(data, limit).ok_or(libc::EINVAL)?))
        }
    }
}

/// `RDMA_MAX_RESP_RES`: as many as the other side allows.
const RDMA_MAX_RESP_RES: u8 = 0xff;
/// `RDMA_MAX_INIT_DEPTH`.
const RDMA_MAX_INIT_DEPTH: u8 = 0xff;

fn clamp(v: u8, allowed: u8) -> u8 {
    v.min(allowed).min(MAX_RD_ATOMIC)
}

fn my_conn(id: &Id, p: &rdma_conn_param, dev: &Device) -> wire::Conn {
    let qpn = if id.c.qp.is_null() {
        p.qp_num & 0x00ff_ffff
    } else {
        // SAFETY: the id's live QP.
        unsafe { (*id.c.qp).qp_num }
    };
    wire::Conn {
        qpn,
        qp_type: id.c.qp_type as u8,
        psn: addr::random_psn(),
        responder_resources: clamp(p.responder_resources, MAX_RD_ATOMIC),
        initiator_depth: clamp(p.initiator_depth, MAX_RD_ATOMIC),
        retry_count: p.retry_count.min(7),
        rnr_retry_count: p.rnr_retry_count.min(7),
        flow_control: p.flow_control,
        srq: u8::from(!id.c.srq.is_null()) | p.srq,
        gid: sgid_of(&id.c),
        lid: dev.lid,
        mtu: dev.mtu,
        qkey: RDMA_UDP_QKEY,
    }
}

/// `rdma_connect`: sends a REQ (SIDR_REQ for UD) to the listener of the destination.
///
/// # Safety
/// `p` is null or a valid `rdma_conn_param` whose private data is as long as it says.
pub unsafe fn connect(id: &mut Id, p: *const rdma_conn_param) -> Result<(), i32> {
    let ud = id.conn.is_ud();
    // SAFETY: forwarded.
    let (p, private) = unsafe {
        params(
            p,
            if ud {
                wire::SIDR_REQ_PRIVATE
            } else {
                wire::REQ_PRIVATE
            },
        )
    }?;
    let a = agent()?;
    let dev = verbs::by_context(id.c.verbs).ok_or(libc::EINVAL)?;
    let conn = id.conn.clone();
    let mine = my_conn(id, &p, dev);
    let (src, dst) = {
        let mut s = conn.lock();
        if s.phase != Phase::RouteResolved {
            return Err(libc::EINVAL);
        }
        let (Some(src), Some(dst)) = (s.local, s.remote) else {
            return Err(libc::EINVAL);
        };
        s.phase = Phase::ReqSent;
        s.mine = Some(mine);
        s.deadline = Some(Instant::now() + agent::cm_timeout());
        (src, dst)
    };
    a.kick();
    let m = a.message(
        if ud { Kind::SidrReq } else { Kind::Req },
        conn.num,
        0,
        Body::Req {
            ps: conn.ps as u16,
            conn: mine,
            src,
            dst,
            private,
        },
    );
    let mut sent = Err(SendError::Gone);
    let mut to = String::new();
    for name in addr::candidates(conn.ps, &dst) {
        sent = a.send(&name, &m);
        if sent != Err(SendError::Gone) {
            to = name;
            break;
        }
    }
    match sent {
        Ok(()) => {
            let mut s = conn.lock();
            if s.phase == Phase::ReqSent {
                s.awaiting = Some(to);
            }
        }
        Err(SendError::Gone) => {
            // Nobody listens there: the REJ the remote CM would send.
            let mut s = conn.lock();
            if s.phase == Phase::ReqSent {
                s.phase = Phase::Failed;
                s.deadline = None;
                conn.report(
                    &s,
                    What::Rejected(reason::INVALID_SERVICE_ID, Private::EMPTY),
                );
            }
        }
        Err(SendError::Other(e)) => {
            let mut s = conn.lock();
            s.phase = Phase::RouteResolved;
            s.deadline = None;
            return Err(e);
        }
    }
    complete(id)
}

/// `rdma_listen`: from now on REQs are taken, and the id is found by its listener name.
pub fn listen(id: &mut Id, backlog: c_int) -> Result<(), i32> {
    let conn = id.conn.clone();
    let mut s = conn.lock();
    let local = s.local.ok_or(libc::EINVAL)?;
    let info = s.listen.as_mut().ok_or(libc::EINVAL)?;
    if info.listening.is_none() {
        let name = addr::listener_name(conn.ps, &local);
        agent()?.publish_listener(&info.socket, &name)?;
        info.listening = Some(name);
    }
    info.active = true;
    info.backlog = if backlog <= 0 {
        agent::MAX_BACKLOG
    } else {
        (backlog as usize).min(agent::MAX_BACKLOG)
    };
    s.phase = Phase::Listening;
    Ok(())
}

/// `rdma_accept`: the QP to RTS, then a REP (SIDR_REP for UD).
///
/// # Safety
/// `p` is null or a valid `rdma_conn_param` whose private data is as long as it says.
pub unsafe fn accept(id: &mut Id, p: *const rdma_conn_param) -> Result<(), i32> {
    let ud = id.conn.is_ud();
    // SAFETY: forwarded.
    let (p, private) = unsafe {
        params(
            p,
            if ud {
                wire::SIDR_REP_PRIVATE
            } else {
                wire::REP_PRIVATE
            },
        )
    }?;
    let a = agent()?;
    let dev = verbs::by_context(id.c.verbs).ok_or(libc::EINVAL)?;
    let conn = id.conn.clone();
    let peer = {
        let mut s = conn.lock();
        let Some(peer) = s.peer.filter(|_| s.phase == Phase::ReqRcvd) else {
            return Err(libc::EINVAL);
        };
        let mut mine = my_conn(id, &p, dev);
        // The PSN chosen when the REQ came (a program may have moved its QP with it).
        if let Some(prev) = s.mine {
            mine.psn = prev.psn;
        }
        // What the request allows, from this side: its initiator depth is our
        // responder resources and the other way round (IB CM's REQ and REP).
        mine.responder_resources = clamp(mine.responder_resources, peer.conn.initiator_depth);
        mine.initiator_depth = clamp(mine.initiator_depth, peer.conn.responder_resources);
        // This QP uses the retry count the REQ asked for, and its RNR retry count.
        mine.retry_count = peer.conn.retry_count;
        let mut qp_side = mine;
        qp_side.rnr_retry_count = peer.conn.rnr_retry_count;
        s.mine = Some(qp_side);
        s.phase = if ud { Phase::Connected } else { Phase::RepSent };
        s.deadline = (!ud).then(|| Instant::now() + agent::cm_timeout());
        s.awaiting = (!ud).then(|| peer.name.as_str().to_string());
        // The REP carries the RNR retry count the other side's QP is to use.
        (peer, mine)
    };
    a.kick();
    let (peer, mine) = peer;
    if let Err(e) = connect_qp(id) {
        let mut s = conn.lock();
        s.phase = Phase::ReqRcvd;
        s.deadline = None;
        return Err(e);
    }
    let parent = conn.lock().parent.clone();
    release_backlog(parent.as_ref());
    let m = a.message(
        if ud { Kind::SidrRep } else { Kind::Rep },
        conn.num,
        peer.comm,
        Body::Rep {
            conn: mine,
            status: 0,
            private,
        },
    );
    if let Err(e) = a.send(peer.name.as_str(), &m) {
        let mut s = conn.lock();
        s.phase = Phase::Failed;
        s.deadline = None;
        return Err(match e {
            SendError::Gone => libc::ECONNREFUSED,
            SendError::Other(e) => e,
        });
    }
    if ud {
        return Ok(());
    }
    complete(id)
}

/// `rdma_reject`: a REJ with reason 28 (consumer) and up to 148 bytes of private data
/// (SIDR_REP with status 1, "rejected", for UD).
///
/// # Safety
/// `data` is null or `len` readable bytes.
pub unsafe fn reject(id: &mut Id, data: *const c_void, len: u8) -> Result<(), i32> {
    let ud = id.conn.is_ud();
    let n = usize::from(len);
    let limit = if ud {
        wire::SIDR_REP_PRIVATE
    } else {
        wire::REJ_PRIVATE
    };
    if n > limit || (n > 0 && data.is_null()) {
        return Err(libc::EINVAL);
    }
    let bytes = if n == 0 {
        &[][..]
    } else {
        // SAFETY: the caller's contract.
        unsafe { core::slice::from_raw_parts(data.cast::<u8>(), n) }
    };
    let private = Private::new(bytes, limit).ok_or(libc::EINVAL)?;
    let a = agent()?;
    let conn = id.conn.clone();
    let (peer, parent) = {
        let mut s = conn.lock();
        // A passive id rejects a request; an active RC id may reject the reply after
        // its CONNECT_RESPONSE (IB CM's REJ in REP-received, IBA 12.9.6; Linux's
        // ib_send_cm_rej takes IB_CM_REP_RCVD).
        let rep_rcvd = s.phase == Phase::RepRcvd && !ud;
        let Some(peer) = s.peer.filter(|_| s.phase == Phase::ReqRcvd || rep_rcvd) else {
            return Err(libc::EINVAL);
        };
        let passive = s.phase == Phase::ReqRcvd;
        s.phase = Phase::Failed;
        (peer, passive.then(|| s.parent.clone()).flatten())
    };
    release_backlog(parent.as_ref());
    let body = if ud {
        Body::Rep {
            conn: wire::Conn {
                qpn: 0,
                qp_type: 0,
                psn: 0,
                responder_resources: 0,
                initiator_depth: 0,
                retry_count: 0,
                rnr_retry_count: 0,
                flow_control: 0,
                srq: 0,
                gid: [0; 16],
                lid: 0,
                mtu: 0,
                qkey: 0,
            },
            status: 1,
            private,
        }
    } else {
        Body::Rej {
            reason: reason::CONSUMER,
            private,
        }
    };
    let kind = if ud { Kind::SidrRep } else { Kind::Rej };
    let m = a.message(kind, conn.num, peer.comm, body);
    a.send_brief(peer.name.as_str(), &m);
    Ok(())
}

/// `rdma_disconnect`: the QP to ERROR, then a DREQ (DISCONNECTED follows the DREP, or
/// the timeout); on an id the peer already disconnected, only the QP.
pub fn disconnect(id: &mut Id) -> Result<(), i32> {
    let a = agent()?;
    let conn = id.conn.clone();
    let peer = {
        let mut s = conn.lock();
        match s.phase {
            Phase::Connected | Phase::RepSent => {
                s.phase = Phase::DreqSent;
                s.deadline = Some(Instant::now() + agent::cm_timeout());
                s.awaiting = s.peer.map(|p| p.name.as_str().to_string());
                s.peer
            }
            Phase::Disconnected | Phase::DreqSent => None,
            _ => return Err(libc::EINVAL),
        }
    };
    qp_to_error(id);
    a.kick();
    if let Some(p) = peer {
        if a.tell(&conn, &p, Kind::Dreq).is_err() {
            // The peer is gone: no DREP will come.
            let mut s = conn.lock();
            if s.phase == Phase::DreqSent {
                s.phase = Phase::Disconnected;
                s.deadline = None;
                conn.report(&s, What::Disconnected);
            }
        }
    }
    Ok(())
}

/// `rdma_establish`: after a CONNECT_RESPONSE on an id without a QP of ours, the RTU.
pub fn establish(id: &mut Id) -> Result<(), i32> {
    let a = agent()?;
    let conn = id.conn.clone();
    let peer = {
        let mut s = conn.lock();
        let Some(p) = s.peer.filter(|_| s.phase == Phase::RepRcvd) else {
            return Err(libc::EINVAL);
        };
        s.phase = Phase::Connected;
        p
    };
    a.tell(&conn, &peer, Kind::Rtu)
        .map_err(|_| libc::ECONNRESET)
}

/// The C id of a connection, if it has one.
fn c_id_of(conn: &Conn) -> *mut Id {
    conn.c_id.load(Ordering::Acquire) as *mut Id
}

fn copy_conn(ev: &mut Event, c: &wire::Conn, private: &Private) {
    let n = private.as_slice().len();
    ev.private[..n].copy_from_slice(private.as_slice());
    // The other side's values, as this side sees them: its initiator depth is our
    // responder resources (IB CM's REQ/REP event data).
    ev.c.param.conn = rdma_conn_param {
        private_data: if n > 0 {
            ev.private.as_ptr().cast()
        } else {
            ptr::null()
        },
        private_data_len: n as u8,
        responder_resources: c.initiator_depth,
        initiator_depth: c.responder_resources,
        flow_control: c.flow_control,
        retry_count: c.retry_count,
        rnr_retry_count: c.rnr_retry_count,
        srq: c.srq,
        qp_num: c.qpn,
    };
}

fn copy_ud(ev: &mut Event, c: &wire::Conn, private: &Private, id: &rdma_cm_id) {
    let port = id.port_num;
    let sgid_index = verbs::by_context(id.verbs).map_or(0, |d| d.gid_index(&sgid_of(id)));
    let n = private.as_slice().len();
    ev.private[..n].copy_from_slice(private.as_slice());
    // SAFETY: all-zero is a valid address vector.
    let mut ah: ibv_ah_attr = unsafe { core::mem::zeroed() };
    ah.dlid = c.lid;
    ah.port_num = port.max(1);
    if c.lid == 0 {
        ah.is_global = 1;
        ah.grh.dgid = ibv_gid { raw: c.gid };
        ah.grh.hop_limit = 64;
        ah.grh.sgid_index = sgid_index;
    }
    ev.c.param.ud = rdma_ud_param {
        private_data: if n > 0 {
            ev.private.as_ptr().cast()
        } else {
            ptr::null()
        },
        private_data_len: n as u8,
        ah_attr: ah,
        qp_num: c.qpn,
        qkey: c.qkey,
    };
}

/// `rdma_get_cm_event`: the next event of the channel whose queue is `queue` (see
/// [`queue_of`]), made into an `rdma_cm_event`.
pub fn get_event(queue: Arc<Queue>) -> Result<*mut Event, i32> {
    // The wait holds the queue, not the channel: a program may destroy the channel
    // while a thread of its own still waits here (rping's CM thread does as it exits),
    // and the waiter then stays blocked on a live descriptor, as a reader of the
    // kernel's channel stays in its `read`, rather than reading freed memory.
    loop {
        let p = queue
            .take()
            .map_err(|e| e.raw_os_error().unwrap_or(libc::EIO))?;
        if p.conn.destroyed.load(Ordering::Acquire) {
            if let What::Request(child) = p.what {
                reject_unclaimed(&child);
            }
            continue;
        }
        let idp = c_id_of(&p.conn);
        if idp.is_null() {
            continue;
        }
        // SAFETY: the id is alive (not destroyed, checked above; destroy waits for
        // nothing from here, but it is the program's to not destroy an id while it
        // takes its events, as with librdmacm).
        let id = unsafe { &mut *idp };
        let mut ev = Box::new(Event {
            // SAFETY: all-zero is a valid rdma_cm_event (pointers, integers, a union of
            // plain structs).
            c: unsafe { core::mem::zeroed() },
            private: [0; 256],
            conn: p.conn.clone(),
        });
        ev.c.id = idp.cast();
        let (kind, status) = match p.what {
            What::AddrResolved => (event::ADDR_RESOLVED, 0),
            What::AddrError(e) => (event::ADDR_ERROR, e),
            What::RouteResolved => (event::ROUTE_RESOLVED, 0),
            What::Request(child) => {
                let Some(peer) = child.lock().peer else {
                    continue;
                };
                let (local, remote) = {
                    let s = child.lock();
                    (s.local, s.remote)
                };
                let qp_type = id.c.qp_type;
                let cid = new_id(child.clone(), id.c.channel.cast(), id.c.context, qp_type);
                // SAFETY: just made.
                let c = unsafe { &mut *cid };
                if let Some((l, Ok(at))) = local.map(|l| (l, verbs::place(l.ip()))) {
                    let dev = at.dev;
                    set_route_addr(c, &at, &l, remote.as_ref().map(|r| (r, peer.conn.gid)));
                    c.c.route.path_rec = &mut c.path;
                    c.c.route.num_paths = 1;
                    c.path = ibv_sa_path_rec {
                        dgid: peer.conn.gid,
                        sgid: at.gid,
                        dlid: peer.conn.lid.to_be(),
                        slid: dev.lid.to_be(),
                        numb_path: 1,
                        reversible: 1,
                        pkey: 0xffffu16.to_be(),
                        mtu: peer.conn.mtu.min(dev.mtu),
                        mtu_selector: 2,
                        ..ibv_sa_path_rec::default()
                    };
                }
                ev.c.listen_id = idp.cast();
                ev.c.id = cid.cast();
                if child.is_ud() {
                    copy_ud(&mut ev, &peer.conn, &peer.private, &c.c);
                } else {
                    copy_conn(&mut ev, &peer.conn, &peer.private);
                }
                if !id.own_channel.is_null() {
                    // The listener is synchronous: so is the new id (rdma-core
                    // migrates it to a channel of its own).
                    if let Ok(own) = create_channel() {
                        c.own_channel = own;
                        c.c.channel = own.cast();
                        // SAFETY: just made.
                        child.lock().queue = unsafe { &*own }.queue.clone();
                    }
                }
                if let Some((mut attr, pd)) = id.ep_attr {
                    // SAFETY: the attributes rdma_create_ep was given, copied.
                    let _ = unsafe { create_qp(c, pd, &mut attr) };
                }
                child.handed_out();
                ev.conn = child;
                (event::CONNECT_REQUEST, 0)
            }
            What::Reply => {
                let Some(peer) = p.conn.lock().peer else {
                    continue;
                };
                copy_conn(&mut ev, &peer.conn, &peer.private);
                // Our side: the REP's values, within what we offered.
                {
                    let mut s = p.conn.lock();
                    if let Some(m) = s.mine.as_mut() {
                        m.responder_resources =
                            clamp(m.responder_resources, peer.conn.initiator_depth);
                        m.initiator_depth = clamp(m.initiator_depth, peer.conn.responder_resources);
                        m.rnr_retry_count = peer.conn.rnr_retry_count;
                    }
                }
                if id.c.qp.is_null() {
                    (event::CONNECT_RESPONSE, 0)
                } else {
                    match connect_qp(id) {
                        Ok(()) => {
                            let rtu = establish(id);
                            match rtu {
                                Ok(()) => (event::ESTABLISHED, 0),
                                Err(e) => (event::CONNECT_ERROR, -e),
                            }
                        }
                        Err(e) => {
                            if let Ok(a) = agent() {
                                let rej = a.message(
                                    Kind::Rej,
                                    p.conn.num,
                                    peer.comm,
                                    Body::Rej {
                                        reason: reason::CONSUMER,
                                        private: Private::EMPTY,
                                    },
                                );
                                a.send_brief(peer.name.as_str(), &rej);
                            }
                            p.conn.lock().phase = Phase::Failed;
                            qp_to_error(id);
                            (event::CONNECT_ERROR, -e)
                        }
                    }
                }
            }
            What::Established => {
                if p.conn.is_ud() {
                    let Some(peer) = p.conn.lock().peer else {
                        continue;
                    };
                    copy_ud(&mut ev, &peer.conn, &peer.private, &id.c);
                }
                (event::ESTABLISHED, 0)
            }
            What::Rejected(r, private) => {
                let n = private.as_slice().len();
                ev.private[..n].copy_from_slice(private.as_slice());
                ev.c.param.conn.private_data_len = n as u8;
                if n > 0 {
                    ev.c.param.conn.private_data = ev.private.as_ptr().cast();
                }
                qp_to_error(id);
                (event::REJECTED, c_int::from(r))
            }
            What::Unreachable(e) => (event::UNREACHABLE, e),
            What::Disconnected => (event::DISCONNECTED, 0),
            What::TimewaitExit => (event::TIMEWAIT_EXIT, 0),
            What::User(kind, status, arg) => {
                ev.c.param.arg = arg;
                (kind, status)
            }
        };
        ev.c.event = kind;
        ev.c.status = status;
        if kind != event::CONNECT_REQUEST {
            ev.conn.handed_out();
        }
        return Ok(Box::into_raw(ev));
    }
}

/// `rdma_ack_cm_event`.
///
/// # Safety
/// `ev` came from [`get_event`] and is not used after this call.
pub unsafe fn ack(ev: *mut Event) {
    // SAFETY: the caller's contract.
    let ev = unsafe { Box::from_raw(ev) };
    ev.conn.acked();
}

/// `rdma_migrate_id`: the id's events go to `ch` from now on (those queued stay).
///
/// # Safety
/// `ch` is null or a live channel.
pub unsafe fn migrate(id: &mut Id, ch: *mut rdma_event_channel) -> Result<(), i32> {
    let (chan, own) = if ch.is_null() {
        let own = create_channel()?;
        (own, own)
    } else {
        (ch.cast::<Channel>(), ptr::null_mut())
    };
    let queue = queue_of(chan.cast())?;
    id.conn.lock().queue = queue;
    id.c.channel = chan.cast();
    if !id.own_channel.is_null() {
        // SAFETY: the id's previous own channel; nothing else uses it.
        unsafe { destroy_channel(id.own_channel) };
    }
    id.own_channel = own;
    Ok(())
}

/// `rdma_get_request`: a synchronous listener's next connection request.
pub fn get_request(listen: &mut Id) -> Result<*mut rdma_cm_id, i32> {
    if listen.own_channel.is_null() {
        return Err(libc::EINVAL);
    }
    complete(listen)?;
    let ev = listen.c.event;
    // SAFETY: the listener's own event, just taken.
    let e = unsafe { &*ev };
    if e.event != event::CONNECT_REQUEST {
        return Err(libc::EINVAL);
    }
    let new = e.id;
    // SAFETY: the event is the listener's; acknowledged once, here.
    unsafe { ack(ev.cast()) };
    listen.c.event = ptr::null_mut();
    Ok(new)
}

/// Keeps `rdma_create_ep`'s QP attributes for a passive id's requests.
pub fn keep_ep_attr(id: &mut Id, attr: ibv_qp_init_attr, pd: *mut ibv_pd) {
    id.ep_attr = Some((attr, pd));
}

/// `rdma_write_cm_event`.
pub fn write_event(id: &mut Id, kind: u32, status: c_int, arg: u64) -> Result<(), i32> {
    let s = id.conn.lock();
    id.conn.report(&s, What::User(kind, status, arg));
    Ok(())
}

/// `rdma_set_option`: the `RDMA_OPTION_ID` options are taken (AFONLY recorded, the
/// others have no effect here); `RDMA_OPTION_IB_PATH` is not supported.
///
/// # Safety
/// `val` is null or `len` readable bytes.
pub unsafe fn set_option(
    id: &mut Id,
    level: c_int,
    name: c_int,
    val: *const c_void,
    len: usize,
) -> Result<(), i32> {
    if val.is_null() {
        return Err(libc::EINVAL);
    }
    match (level, name) {
        (abi::RDMA_OPTION_ID, abi::RDMA_OPTION_ID_AFONLY) if len == 4 => {
            // SAFETY: 4 readable bytes (the caller's contract).
            let v = unsafe { val.cast::<c_int>().read_unaligned() };
            id.conn.lock().afonly = v != 0;
            Ok(())
        }
        (abi::RDMA_OPTION_ID, abi::RDMA_OPTION_ID_REUSEADDR) if len == 4 => Ok(()),
        (abi::RDMA_OPTION_ID, abi::RDMA_OPTION_ID_TOS | abi::RDMA_OPTION_ID_ACK_TIMEOUT)
            if len == 1 =>
        {
            Ok(())
        }
        (abi::RDMA_OPTION_ID, _) => Err(libc::EINVAL),
        _ => Err(libc::ENOSYS),
    }
}
