//! Bringing up a virtual QP's QPs through the RDMA connection manager, beside the TCP
//! card exchange ([`crate::exchange`]): from an IP address and a port, one CM
//! connection per physical QP (data QPs, then the notify QP), each carrying its piece
//! of the endpoint card in its private data ([`piece`]). The QPs stay the endpoint's:
//! the CM gives each side the other's card (the QP numbers from its REQ and REP), and
//! [`Endpoint::connect`](crate::Endpoint::connect) moves the QPs as after a card
//! exchange, with the same agreement checks.
//!
//! ```text
//! client                                        server (CmListener)
//! connect(): resolve, REQ per QP (pieces) --->  request(): all pieces of one card,
//!                                               checked (a refusal: REJ with the
//!        <--- REP per QP (its pieces)           reason), then Endpoint::connect
//! Endpoint::connect, then establish(): RTU ---> accept(): REP, wait for the RTUs
//! ```
//!
//! IB CM's order: the passive side's QPs are ready to receive before its REP, the
//! active side's before its RTU, so that neither sends to a QP not yet in RTR. An
//! unreachable address, a refused connection and a peer that never answers are each an
//! [`Error::RdmaCm`] (or [`Error::PeerRefused`] with the peer's
//! reason) within the caller's timeout.

pub mod piece;

use core::ffi::c_void;
use core::fmt;
use core::ptr;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::card::Card;
use crate::error::{Error, Result};
use crate::loader::cm::RdmaCm;
use crate::sys::cm::{event, rdma_cm_id, rdma_conn_param, rdma_event_channel, RDMA_PS_TCP};
use piece::{Assembly, Piece, PieceError};

/// The first bytes of a REJ's private data that carries a refusal reason.
pub const REFUSAL: [u8; 2] = *b"VR";

/// The most bytes of a reason a REJ carries (its 148 bytes of private data, less
/// [`REFUSAL`]).
const MAX_REFUSAL: usize = 146;

/// How long past the caller's deadline the CM's own answer to an address or route
/// resolution is awaited.
const GRACE: Duration = Duration::from_millis(250);

/// The most unfinished cards a listener gathers at once; a new one past this makes the
/// oldest give way.
pub const MAX_SESSIONS: usize = 16;

/// Why connecting through the CM failed.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum CmError {
    /// A librdmacm call failed.
    Call {
        /// The call, e.g. `rdma_resolve_addr`.
        call: &'static str,
        /// Its errno.
        errno: i32,
    },
    /// An event other than the one awaited (ADDR_ERROR, UNREACHABLE, …).
    Event {
        /// What was being done.
        stage: &'static str,
        /// librdmacm's name of the event.
        event: String,
        /// Its status (a negative errno, or a REJ reason).
        status: i32,
    },
    /// The peer's CM rejected the connection without a vqp reason (status 8: nobody
    /// listens there).
    Rejected {
        /// The REJ reason as rdma_cm reports it.
        status: i32,
    },
    /// Nothing came within the timeout.
    Timeout {
        /// What was being waited for.
        stage: &'static str,
        /// How long it had.
        after: Duration,
    },
    /// The peer's private data is not a card piece, or its pieces disagree.
    Piece(PieceError),
}

impl fmt::Display for CmError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CmError::Call { call, errno } => write!(
                f,
                "{call} failed: {}",
                std::io::Error::from_raw_os_error(*errno)
            ),
            CmError::Event {
                stage,
                event,
                status,
            } => write!(f, "{stage}: {event} (status {status})"),
            CmError::Rejected { status } => {
                write!(
                    f,
                    "the peer's connection manager rejected the connection (reason {status})"
                )
            }
            CmError::Timeout { stage, after } => {
                write!(f, "{stage}: nothing within {} ms", after.as_millis())
            }
            CmError::Piece(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for CmError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            CmError::Piece(e) => Some(e),
            _ => None,
        }
    }
}

fn cm_err(e: CmError) -> Error {
    Error::RdmaCm(e)
}

fn errno() -> i32 {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// An event channel, destroyed when the last id on it is.
struct Channel {
    cm: RdmaCm,
    ch: *mut rdma_event_channel,
}

impl Channel {
    fn new(cm: &RdmaCm) -> Result<Arc<Channel>> {
        // SAFETY: takes no arguments.
        let ch = unsafe { (cm.table().rdma_create_event_channel)() };
        if ch.is_null() {
            return Err(cm_err(CmError::Call {
                call: "rdma_create_event_channel",
                errno: errno(),
            }));
        }
        Ok(Arc::new(Channel { cm: cm.clone(), ch }))
    }

    /// The next event, copied out and acknowledged, before `deadline`.
    fn next(&self, stage: &'static str, deadline: Instant, timeout: Duration) -> Result<Event> {
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            // SAFETY: the channel is live while `self` is.
            let fd = unsafe { (*self.ch).fd };
            let mut p = libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            };
            // Rounded up, so that the wait is never cut a millisecond short.
            let ms = left.as_micros().div_ceil(1000).min(i32::MAX as u128) as i32;
            // SAFETY: one valid pollfd.
            let n = unsafe { libc::poll(&mut p, 1, ms) };
            if n < 0 && errno() == libc::EINTR {
                continue;
            }
            if n <= 0 {
                return Err(cm_err(CmError::Timeout {
                    stage,
                    after: timeout,
                }));
            }
            let mut e = ptr::null_mut();
            // SAFETY: a live channel and an out-pointer.
            if unsafe { (self.cm.table().rdma_get_cm_event)(self.ch, &mut e) } != 0 {
                return Err(cm_err(CmError::Call {
                    call: "rdma_get_cm_event",
                    errno: errno(),
                }));
            }
            // SAFETY: the event just taken, alive until acknowledged below.
            let ev = unsafe { &*e };
            let conn_event = matches!(
                ev.event,
                event::CONNECT_REQUEST
                    | event::CONNECT_RESPONSE
                    | event::REJECTED
                    | event::ESTABLISHED
            );
            let (private, qp_num) = if conn_event {
                // SAFETY: a connection event's parameters are `conn`.
                let c = unsafe { ev.param.conn };
                let n = usize::from(c.private_data_len);
                let private = if n == 0 || c.private_data.is_null() {
                    Vec::new()
                } else {
                    // SAFETY: the event's private data, `n` bytes, alive until the ack.
                    unsafe { core::slice::from_raw_parts(c.private_data.cast::<u8>(), n) }.to_vec()
                };
                (private, c.qp_num)
            } else {
                (Vec::new(), 0)
            };
            let out = Event {
                event: ev.event,
                status: ev.status,
                id: ev.id,
                private,
                qp_num,
            };
            // SAFETY: acknowledged once, after everything was copied out.
            unsafe { (self.cm.table().rdma_ack_cm_event)(e) };
            return Ok(out);
        }
    }

    fn name(&self, event: u32) -> String {
        self.cm.event_str(event)
    }
}

impl Drop for Channel {
    fn drop(&mut self) {
        // SAFETY: every id on the channel holds an `Arc` of it, so none is left.
        unsafe { (self.cm.table().rdma_destroy_event_channel)(self.ch) };
    }
}

/// An event, copied out of librdmacm's.
struct Event {
    event: u32,
    status: i32,
    id: *mut rdma_cm_id,
    private: Vec<u8>,
    qp_num: u32,
}

/// A cm id; disconnected (when it was connected) and destroyed when dropped.
struct Id {
    id: *mut rdma_cm_id,
    ch: Arc<Channel>,
    connected: bool,
}

impl Id {
    fn new(ch: &Arc<Channel>) -> Result<Id> {
        let mut id = ptr::null_mut();
        // SAFETY: a live channel and an out-pointer.
        let r =
            unsafe { (ch.cm.table().rdma_create_id)(ch.ch, &mut id, ptr::null_mut(), RDMA_PS_TCP) };
        if r != 0 {
            return Err(cm_err(CmError::Call {
                call: "rdma_create_id",
                errno: errno(),
            }));
        }
        Ok(Id {
            id,
            ch: ch.clone(),
            connected: false,
        })
    }

    fn check(&self, call: &'static str, r: i32) -> Result<()> {
        if r != 0 {
            return Err(cm_err(CmError::Call {
                call,
                errno: errno(),
            }));
        }
        Ok(())
    }

    /// Waits for `want` on this id (the channel is the id's own).
    fn expect(
        &self,
        stage: &'static str,
        want: u32,
        deadline: Instant,
        t: Duration,
    ) -> Result<Event> {
        let e = self.ch.next(stage, deadline, t)?;
        if e.event == want {
            return Ok(e);
        }
        Err(unexpected(&self.ch, stage, &e))
    }
}

/// The error an event other than the awaited one is.
fn unexpected(ch: &Channel, stage: &'static str, e: &Event) -> Error {
    if e.event == event::REJECTED {
        if e.private.starts_with(&REFUSAL) {
            let text = String::from_utf8_lossy(&e.private[REFUSAL.len()..]);
            let reason: String = text.trim_end_matches('\0').escape_default().collect();
            return Error::PeerRefused { reason };
        }
        return cm_err(CmError::Rejected { status: e.status });
    }
    cm_err(CmError::Event {
        stage,
        event: ch.name(e.event),
        status: e.status,
    })
}

impl Drop for Id {
    fn drop(&mut self) {
        let t = self.ch.cm.table();
        if self.connected {
            // SAFETY: a live, connected id.
            unsafe { (t.rdma_disconnect)(self.id) };
        }
        // SAFETY: a live id of ours whose events were all acknowledged; not used again.
        unsafe { (t.rdma_destroy_id)(self.id) };
    }
}

fn param(private: &[u8], qp_num: u32) -> rdma_conn_param {
    rdma_conn_param {
        private_data: private.as_ptr().cast::<c_void>(),
        private_data_len: private.len() as u8,
        responder_resources: 16,
        initiator_depth: 16,
        flow_control: 1,
        retry_count: 7,
        rnr_retry_count: 7,
        srq: 0,
        qp_num: qp_num & 0x00ff_ffff,
    }
}

fn qpns(card: &Card) -> Vec<u32> {
    card.data
        .iter()
        .chain(card.notify.iter())
        .map(|q| q.qpn)
        .collect()
}

fn random_tag() -> u32 {
    crate::endpoint::random_24bit()
}

/// The CM connections of a virtual QP, once established: disconnected when dropped.
pub struct CmConnection {
    _ids: Vec<Id>,
}

impl fmt::Debug for CmConnection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CmConnection({} QPs)", self._ids.len())
    }
}

/// The client's connections after the server's REPs: [`Dialled::establish`] sends
/// the RTUs once the endpoint's QPs are connected.
pub struct Dialled {
    ids: Vec<Id>,
}

impl fmt::Debug for Dialled {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Dialled({} QPs)", self.ids.len())
    }
}

/// Connects to the server at `to`: one CM connection per QP of `mine`, each REQ
/// carrying its card piece; returns the server's card (its QP numbers from the REPs).
/// Everything is bounded by `timeout`.
///
/// # Errors
/// [`Error::RdmaCm`] for an address that does not resolve, a connection the peer's CM
/// rejects (nobody listening) or that is unreachable, and for nothing within
/// `timeout`; [`Error::PeerRefused`] when the server refused this card, with its
/// reason; [`Error::Card`] when the server's card does not agree with ours.
pub fn connect(
    cm: &RdmaCm,
    to: SocketAddr,
    mine: &Card,
    timeout: Duration,
) -> Result<(Card, Dialled)> {
    let deadline = Instant::now() + timeout;
    let pieces = Piece::split(mine, random_tag()).map_err(|e| cm_err(CmError::Piece(e)))?;
    let qpns = qpns(mine);
    let mut ids = Vec::with_capacity(pieces.len());
    for (piece, &qpn) in pieces.iter().zip(&qpns) {
        let id = Id::new(&Channel::new(cm)?)?;
        let t = cm.table();
        let left = deadline.saturating_duration_since(Instant::now());
        let ms = left.as_micros().div_ceil(1000).clamp(1, i32::MAX as u128) as i32;
        let mut dst = crate::cm::sockaddr(&to);
        // SAFETY: a live id and a valid address of its family.
        let r = unsafe {
            (t.rdma_resolve_addr)(
                id.id,
                ptr::null_mut(),
                (&mut dst as *mut libc::sockaddr_storage).cast(),
                ms,
            )
        };
        id.check("rdma_resolve_addr", r)?;
        // The CM's own answer (ADDR_ERROR at the timeout given it) is awaited a little
        // past the deadline, so that it, not a bare timeout, is the error.
        id.expect(
            "resolve the address",
            event::ADDR_RESOLVED,
            deadline + GRACE,
            timeout,
        )?;
        // SAFETY: a live id with its address resolved.
        let r = unsafe { (t.rdma_resolve_route)(id.id, ms) };
        id.check("rdma_resolve_route", r)?;
        id.expect(
            "resolve the route",
            event::ROUTE_RESOLVED,
            deadline + GRACE,
            timeout,
        )?;
        let bytes = piece.encode();
        let mut p = param(&bytes, qpn);
        // SAFETY: a routed id; `p` and its private data live through the call.
        let r = unsafe { (t.rdma_connect)(id.id, &mut p) };
        id.check("rdma_connect", r)?;
        ids.push(id);
    }
    let mut peer = Assembly::default();
    for id in &ids {
        let e = id.expect("connect", event::CONNECT_RESPONSE, deadline, timeout)?;
        let piece = Piece::decode(&e.private).map_err(|e| cm_err(CmError::Piece(e)))?;
        peer.add(&piece, e.qp_num)
            .map_err(|e| cm_err(CmError::Piece(e)))?;
    }
    let card = peer
        .card()
        .ok_or(cm_err(CmError::Piece(PieceError::Short(0))))?;
    // A card this side refuses is refused visibly on both: each REP is rejected with
    // the reason (IB CM's REJ in REP-received).
    if let Err(e) = card.validate().and_then(|()| mine.agree(&card)) {
        let mut b = REFUSAL.to_vec();
        b.extend(e.to_string().bytes().take(MAX_REFUSAL));
        for id in &ids {
            // SAFETY: a live id after its CONNECT_RESPONSE; `b` lives through the call.
            unsafe { (cm.table().rdma_reject)(id.id, b.as_ptr().cast(), b.len() as u8) };
        }
        return Err(Error::Card(e));
    }
    Ok((card, Dialled { ids }))
}

impl Dialled {
    /// Sends the RTUs (call it once the endpoint's QPs are connected). As with the
    /// kernel's rdma_cm, an active side that moves its own QPs gets no ESTABLISHED
    /// event after `rdma_establish` (Linux's `cma_ib_handler` reports ESTABLISHED
    /// there only for ids with a QP of the CM's): the connections are up once the
    /// call returns.
    ///
    /// # Errors
    /// [`Error::RdmaCm`] when `rdma_establish` fails.
    pub fn establish(mut self) -> Result<CmConnection> {
        for id in &mut self.ids {
            let t = id.ch.cm.table();
            // SAFETY: a live id after its CONNECT_RESPONSE.
            let r = unsafe { (t.rdma_establish)(id.id) };
            id.check("rdma_establish", r)?;
            id.connected = true;
        }
        Ok(CmConnection { _ids: self.ids })
    }
}

/// A `sockaddr_storage` holding `a`.
fn sockaddr(a: &SocketAddr) -> libc::sockaddr_storage {
    // SAFETY: all-zero is a valid sockaddr_storage.
    let mut st: libc::sockaddr_storage = unsafe { core::mem::zeroed() };
    match a {
        SocketAddr::V4(v4) => {
            // SAFETY: sockaddr_storage is larger than sockaddr_in and suitably aligned.
            let s = unsafe {
                &mut *(&mut st as *mut libc::sockaddr_storage).cast::<libc::sockaddr_in>()
            };
            s.sin_family = libc::AF_INET as libc::sa_family_t;
            s.sin_port = v4.port().to_be();
            s.sin_addr.s_addr = u32::from_ne_bytes(v4.ip().octets());
        }
        SocketAddr::V6(v6) => {
            // SAFETY: sockaddr_storage is larger than sockaddr_in6 and suitably aligned.
            let s = unsafe {
                &mut *(&mut st as *mut libc::sockaddr_storage).cast::<libc::sockaddr_in6>()
            };
            s.sin6_family = libc::AF_INET6 as libc::sa_family_t;
            s.sin6_port = v6.port().to_be();
            s.sin6_addr.s6_addr = v6.ip().octets();
            s.sin6_flowinfo = v6.flowinfo();
            s.sin6_scope_id = v6.scope_id();
        }
    }
    st
}

/// One client's connections being gathered.
struct Session {
    pieces: Assembly,
    ids: Vec<(u8, Id)>,
    started: Instant,
}

/// A server's listening id: gathers the CM connections of one card at a time.
pub struct CmListener {
    listen: Id,
    sessions: BTreeMap<u32, Session>,
    /// The connections of the card [`request`](Self::request) returned.
    current: Option<Vec<(u8, Id)>>,
}

impl fmt::Debug for CmListener {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CmListener({} sessions)", self.sessions.len())
    }
}

impl CmListener {
    /// Listens at `addr`.
    ///
    /// # Errors
    /// [`Error::RdmaCm`] naming the call that failed (`EADDRINUSE` from
    /// `rdma_bind_addr` when the port is taken).
    pub fn bind(cm: &RdmaCm, addr: SocketAddr) -> Result<CmListener> {
        let listen = Id::new(&Channel::new(cm)?)?;
        let mut a = sockaddr(&addr);
        let t = cm.table();
        // SAFETY: a live id and a valid address.
        let r = unsafe {
            (t.rdma_bind_addr)(listen.id, (&mut a as *mut libc::sockaddr_storage).cast())
        };
        listen.check("rdma_bind_addr", r)?;
        // SAFETY: a bound id.
        let r = unsafe { (t.rdma_listen)(listen.id, 256) };
        listen.check("rdma_listen", r)?;
        Ok(CmListener {
            listen,
            sessions: BTreeMap::new(),
            current: None,
        })
    }

    fn refuse(&self, id: &Id, reason: &str) {
        let mut b = REFUSAL.to_vec();
        b.extend(reason.bytes().take(MAX_REFUSAL));
        // SAFETY: a live id with a request pending; `b` lives through the call.
        unsafe { (id.ch.cm.table().rdma_reject)(id.id, b.as_ptr().cast(), b.len() as u8) };
    }

    /// Waits for a client's whole card (one CM connection per QP) and checks it
    /// against `mine`; a card that does not agree is refused (each of its connections
    /// rejected with the reason) and is the error. Requests of other clients are
    /// gathered meanwhile, at most [`MAX_SESSIONS`] unfinished cards (the oldest gives
    /// way); malformed ones are rejected.
    ///
    /// # Errors
    /// [`Error::Card`] for a card that is malformed or does not agree;
    /// [`Error::RdmaCm`] when the timeout runs out.
    pub fn request(&mut self, mine: &Card, timeout: Duration) -> Result<Card> {
        self.current = None;
        let deadline = Instant::now() + timeout;
        loop {
            let e = self
                .listen
                .ch
                .next("wait for a client's card", deadline, timeout)?;
            if e.event != event::CONNECT_REQUEST {
                // An event of a gathered connection (its client gave up): dropped
                // with its session.
                self.sessions
                    .retain(|_, s| !s.ids.iter().any(|(_, i)| i.id == e.id));
                continue;
            }
            let id = Id {
                id: e.id,
                ch: self.listen.ch.clone(),
                connected: false,
            };
            let piece = match Piece::decode(&e.private) {
                Ok(p) => p,
                Err(err) => {
                    self.refuse(&id, &err.to_string());
                    continue;
                }
            };
            let tag = piece.tag();
            if !self.sessions.contains_key(&tag) && self.sessions.len() >= MAX_SESSIONS {
                // Full: the oldest unfinished card gives way (as a SYN cache drops its
                // oldest entry), so that clients that never finish theirs cannot lock
                // the others out.
                let oldest = self
                    .sessions
                    .iter()
                    .min_by_key(|(_, s)| s.started)
                    .map(|(&t, _)| t);
                if let Some(s) = oldest.and_then(|t| self.sessions.remove(&t)) {
                    for (_, old) in &s.ids {
                        self.refuse(old, "the card did not complete in time");
                    }
                }
            }
            let s = self.sessions.entry(tag).or_insert_with(|| Session {
                pieces: Assembly::default(),
                ids: Vec::new(),
                started: Instant::now(),
            });
            if let Err(err) = s.pieces.add(&piece, e.qp_num) {
                self.refuse(&id, &err.to_string());
                continue;
            }
            s.ids.push((piece.index, id));
            if !s.pieces.complete() {
                continue;
            }
            let Some(s) = self.sessions.remove(&tag) else {
                continue;
            };
            let card = s.pieces.card();
            let verdict = match &card {
                Some(c) => c.validate().and_then(|()| mine.agree(c)),
                None => Ok(()),
            };
            match (card, verdict) {
                (Some(card), Ok(())) => {
                    self.current = Some(s.ids);
                    return Ok(card);
                }
                (_, Err(err)) => {
                    for (_, id) in &s.ids {
                        self.refuse(id, &err.to_string());
                    }
                    return Err(Error::Card(err));
                }
                (None, Ok(())) => continue,
            }
        }
    }

    /// Accepts the card [`request`](Self::request) returned (call it once the
    /// endpoint's QPs are connected): a REP per connection carrying `mine`'s pieces,
    /// then waits for the client's RTUs.
    ///
    /// # Errors
    /// [`Error::RdmaCm`] when no card is pending, a call fails, or the client does not
    /// establish within `timeout`.
    pub fn accept(&mut self, mine: &Card, timeout: Duration) -> Result<CmConnection> {
        let deadline = Instant::now() + timeout;
        let mut ids = self.current.take().ok_or(cm_err(CmError::Call {
            call: "rdma_accept",
            errno: libc::EINVAL,
        }))?;
        ids.sort_by_key(|(i, _)| *i);
        let pieces = Piece::split(mine, random_tag()).map_err(|e| cm_err(CmError::Piece(e)))?;
        let qpns = qpns(mine);
        if pieces.len() != ids.len() {
            return Err(cm_err(CmError::Piece(PieceError::Inconsistent)));
        }
        for ((_, id), (piece, &qpn)) in ids.iter_mut().zip(pieces.iter().zip(&qpns)) {
            let bytes = piece.encode();
            let mut p = param(&bytes, qpn);
            // SAFETY: a request's id; `p` and its private data live through the call.
            let r = unsafe { (id.ch.cm.table().rdma_accept)(id.id, &mut p) };
            id.check("rdma_accept", r)?;
            id.connected = true;
        }
        let mut waiting: Vec<*mut rdma_cm_id> = ids.iter().map(|(_, i)| i.id).collect();
        while !waiting.is_empty() {
            let e = self
                .listen
                .ch
                .next("wait for the client's RTU", deadline, timeout)?;
            if let Some(at) = waiting.iter().position(|&w| w == e.id) {
                if e.event != event::ESTABLISHED {
                    return Err(unexpected(&self.listen.ch, "wait for the client's RTU", &e));
                }
                waiting.swap_remove(at);
            } else if e.event == event::CONNECT_REQUEST {
                // Another client's: rejected for now (it may try again).
                let id = Id {
                    id: e.id,
                    ch: self.listen.ch.clone(),
                    connected: false,
                };
                self.refuse(&id, "the server is busy accepting another client");
            }
        }
        Ok(CmConnection {
            _ids: ids.into_iter().map(|(_, i)| i).collect(),
        })
    }
}

// SAFETY: librdmacm's calls on a channel may be made from any thread (rdma-core's
// `rdma_get_cm_event` reads the channel's descriptor and takes its own locks); the
// channel is destroyed once, by the last `Arc`.
unsafe impl Send for Channel {}
// SAFETY: as above.
unsafe impl Sync for Channel {}
// SAFETY: an id is used by its one owner (`&mut self` or by value), from whichever
// thread holds it; librdmacm's calls on distinct ids are independent.
unsafe impl Send for Id {}
