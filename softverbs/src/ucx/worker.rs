//! [`Worker`]: one UCP context and worker, owning every endpoint, listener, handler and
//! request made through it, and the queue of [`Event`]s its callbacks produce.
//!
//! The callbacks UCP makes (connection requests, endpoint errors, send and receive
//! completions, active messages) run only inside calls made through the worker —
//! mostly [`Worker::progress`] — on the calling thread. Each gets a pointer to a boxed
//! slot the worker owns (the box keeps its address while the tables grow) and touches
//! the worker's state only through `Cell`/`RefCell`s, never through a reference held by
//! the caller across the UCP call. A callback never unwinds into C: a panicking handler
//! is caught, its message dropped, and [`Worker::progress`] reports it.

use core::ffi::c_void;
use std::cell::{Cell, RefCell};
use std::collections::{HashMap, HashSet, VecDeque};
use std::ffi::CString;
use std::net::SocketAddr;
use std::os::fd::RawFd;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr;
use std::time::{Duration, Instant};

use super::error::{check, Error, Status};
use super::sockaddr::{from_storage, to_storage};
use super::sys::{self, Ucp};
use super::{MAX_AM_ID, MAX_HEADER};

/// An endpoint of a [`Worker`]: an index and a generation, so that a closed endpoint's
/// id never names a later one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EpId {
    index: u32,
    generation: u32,
}

/// A listener of a [`Worker`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ListenerId(u32);

/// A peer asking to connect through a listener: accept it ([`Worker::accept`]) or refuse
/// it ([`Worker::reject`]). One left unanswered holds UCP's resources for the
/// connection until the worker is destroyed.
#[derive(Debug)]
pub struct ConnRequest {
    raw: sys::ucp_conn_request_h,
    listener: ListenerId,
    /// The peer's address, when UCP says.
    pub peer: Option<SocketAddr>,
}

/// What happened, in the order the callbacks ran.
#[derive(Debug)]
pub enum Event {
    /// A peer asks to connect through `listener`.
    ConnRequest(ConnRequest),
    /// An endpoint failed (its peer died, refused or reset the connection): every send
    /// on it completes with an error, and it should be closed.
    EndpointFailed {
        /// The endpoint.
        ep: EpId,
        /// [`Error::EndpointFailed`] with UCP's status.
        error: Error,
    },
    /// A send made with [`Worker::am_send`] completed (exactly one per send that was
    /// accepted): UCP has taken the data, and its buffers are released.
    Sent {
        /// The endpoint it was sent on.
        ep: EpId,
        /// The caller's token.
        token: u64,
        /// Whether it was sent.
        result: Result<(), Error>,
    },
    /// A rendezvous receive started with [`Rndv::receive`] or [`Rndv::receive_raw`]
    /// completed.
    Received {
        /// The caller's token.
        token: u64,
        /// The buffer given to [`Rndv::receive`], now holding the data.
        buffer: Option<Vec<u8>>,
        /// The length received.
        result: Result<usize, Error>,
    },
}

/// The data of an active message, as its handler sees it.
pub enum Data<'a> {
    /// The payload, here in full; valid only during the handler.
    Eager(&'a [u8]),
    /// A rendezvous payload still at the sender: fetch it with [`Rndv::receive`] during
    /// the handler, or drop it to discard it (the sender's send then completes).
    Rendezvous(Rndv<'a>),
}

/// A payload to fetch from the sender (UCP's rendezvous protocol: large messages).
pub struct Rndv<'a> {
    state: &'a State,
    desc: *mut c_void,
    len: usize,
}

impl Rndv<'_> {
    /// The payload's length.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the payload is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Fetches the payload into `buffer` (at least [`Rndv::len`] bytes; only the first
    /// `len` are written); [`Event::Received`] with `token` gives the buffer back.
    pub fn receive(self, mut buffer: Vec<u8>, token: u64) -> Result<(), Error> {
        if buffer.len() < self.len {
            return Err(Error::Invalid(
                "the receive buffer is shorter than the payload",
            ));
        }
        let p = buffer.as_mut_ptr();
        // SAFETY: `buffer` is moved into the request and lives until its completion;
        // `p` points into its heap allocation, which does not move with the Vec.
        unsafe { self.start(p, Some(buffer), token) }
    }

    /// Fetches the payload into `len()` bytes at `dest`; [`Event::Received`] with `token`
    /// says when.
    ///
    /// # Safety
    /// `dest` is valid for writes of `len()` bytes until the [`Event::Received`] with
    /// `token` is taken from the worker (or the worker is dropped), and nothing else
    /// accesses it meanwhile.
    pub unsafe fn receive_raw(self, dest: *mut u8, token: u64) -> Result<(), Error> {
        // SAFETY: the caller's contract is the one `start` needs.
        unsafe { self.start(dest, None, token) }
    }

    /// Keeps the payload at the sender past the handler, to fetch later with
    /// [`Worker::receive_deferred`] or discard with [`Worker::release`] — for a request
    /// that must wait its turn. The sender's send completes only then.
    pub fn defer(self) -> Deferred {
        self.state.keep.set(true);
        self.state.deferred.borrow_mut().insert(self.desc as usize);
        Deferred {
            desc: self.desc as usize,
            len: self.len,
        }
    }

    /// # Safety
    /// `dest` is writable for `len` bytes until the request completes.
    unsafe fn start(self, dest: *mut u8, buffer: Option<Vec<u8>>, token: u64) -> Result<(), Error> {
        // SAFETY: the caller's contract; the descriptor is the one of this handler call.
        unsafe {
            fetch(
                self.state,
                self.desc,
                self.len,
                Dest::Contig(dest),
                buffer,
                token,
            )
        };
        Ok(())
    }

    /// Fetches the payload into the scatter list `segments` (pointer, length), in
    /// order, holding at least `len()` bytes; [`Event::Received`] with `token` says
    /// when.
    ///
    /// # Safety
    /// As [`Rndv::receive_raw`], for every segment.
    pub unsafe fn receive_iov_raw(
        self,
        segments: &[(*mut u8, usize)],
        token: u64,
    ) -> Result<(), Error> {
        let dest = scatter(segments, self.len)?;
        // SAFETY: the caller vouches for the segments; the descriptor is this call's.
        unsafe { fetch(self.state, self.desc, self.len, dest, None, token) };
        Ok(())
    }
}

/// A rendezvous payload kept past its handler ([`Rndv::defer`]). Hand it back to the
/// worker that made it: [`Worker::receive_deferred`] or [`Worker::release`]; the
/// worker releases those still held when it is dropped.
#[derive(Debug)]
pub struct Deferred {
    desc: usize,
    len: usize,
}

impl Deferred {
    /// The payload's length.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the payload is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// Starts fetching the rendezvous payload `desc` (`len` bytes) into `dest`; an
/// [`Event::Received`] with `token` follows.
///
/// # Safety
/// `desc` is a descriptor UCP handed to a handler of this worker and nobody consumed;
/// `dest` is writable for `len` bytes until the request completes.
unsafe fn fetch(
    state: &State,
    desc: *mut c_void,
    len: usize,
    dest: Dest,
    buffer: Option<Vec<u8>>,
    token: u64,
) {
    let (iov, datatype) = match dest {
        Dest::Contig(p) => (
            vec![sys::ucp_dt_iov_t {
                buffer: p.cast(),
                length: len,
            }],
            sys::UCP_DATATYPE_BYTES,
        ),
        Dest::Iov(v) => (v, sys::UCP_DATATYPE_IOV),
    };
    // Contiguous: the range and its length; IOV: the list (a heap buffer that
    // stays put inside the request box) and its count.
    let (buf, count) = if datatype == sys::UCP_DATATYPE_IOV {
        (iov.as_ptr() as *mut c_void, iov.len())
    } else {
        (iov[0].buffer, len)
    };
    let req = Box::into_raw(Box::new(RecvReq {
        state: state as *const State,
        token,
        buffer,
        len,
        _iov: iov,
    }));
    let mut param = sys::ucp_request_param_t::empty();
    param.op_attr_mask = sys::UCP_OP_ATTR_FIELD_CALLBACK
        | sys::UCP_OP_ATTR_FIELD_USER_DATA
        | sys::UCP_OP_ATTR_FIELD_DATATYPE;
    param.cb.recv_am = Some(recv_done);
    param.user_data = req.cast();
    param.datatype = datatype;
    // SAFETY: a live worker, the descriptor UCP handed to this handler (consumed
    // here), a destination writable for `len` bytes until completion (the caller's
    // contract; an IOV list owned by the request box), and a parameter block read
    // during the call.
    let r = unsafe { (state.ucp.ucp_am_recv_data_nbx)(state.worker, desc, buf, count, &param) };
    state.finish_request(r, req, "ucp_am_recv_data_nbx", |req, result| {
        let req = *req;
        Event::Received {
            token: req.token,
            buffer: req.buffer,
            result: result.map(|()| req.len),
        }
    });
}

/// An active message, as its handler gets it.
pub struct AmMessage<'a> {
    header: &'a [u8],
    data: Data<'a>,
    from: Option<EpId>,
}

impl<'a> AmMessage<'a> {
    /// The header the sender gave.
    pub fn header(&self) -> &[u8] {
        self.header
    }

    /// The endpoint it came from, to reply on (every message [`Worker::am_send`] sends
    /// names it).
    pub fn from(&self) -> Option<EpId> {
        self.from
    }

    /// The payload's length.
    pub fn len(&self) -> usize {
        match &self.data {
            Data::Eager(d) => d.len(),
            Data::Rendezvous(r) => r.len,
        }
    }

    /// Whether the payload is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The payload.
    pub fn into_data(self) -> Data<'a> {
        self.data
    }
}

/// A receive handler: called for each active message of its id.
type Handler = Box<dyn FnMut(AmMessage<'_>) + Send>;

/// The worker's state, reached from the callbacks through the pointers they were given.
struct State {
    ucp: &'static Ucp,
    worker: sys::ucp_worker_h,
    events: RefCell<VecDeque<Event>>,
    endpoints: RefCell<Vec<Option<Box<EpSlot>>>>,
    generation: Cell<u32>,
    by_handle: RefCell<HashMap<usize, EpId>>,
    listeners: RefCell<Vec<Option<Box<ListenerSlot>>>>,
    handlers: RefCell<Vec<Option<Box<HandlerSlot>>>>,
    /// Close requests in flight: the request and the slot it frees.
    closing: RefCell<Vec<(*mut c_void, Box<EpSlot>)>>,
    /// Requests whose callback has not run yet. A callback frees its request only if it
    /// is still here: past the drop's deadline the worker frees (releases) them itself.
    requests: RefCell<HashSet<usize>>,
    /// A handler panicked since the last progress call.
    panicked: Cell<bool>,
    /// Messages dropped because their handler was already running (a re-entered
    /// handler: a message to itself).
    dropped: Cell<u64>,
    /// Rendezvous descriptors kept past their handler ([`Deferred`]).
    deferred: RefCell<HashSet<usize>>,
    /// Set by [`Rndv::defer`] during a handler: the handler returns `UCS_INPROGRESS`.
    keep: Cell<bool>,
}

struct EpSlot {
    state: *const State,
    id: EpId,
    handle: Cell<sys::ucp_ep_h>,
    failed: Cell<Option<Status>>,
}

struct ListenerSlot {
    state: *const State,
    id: ListenerId,
    handle: Cell<sys::ucp_listener_h>,
}

struct HandlerSlot {
    state: *const State,
    handler: RefCell<Option<Handler>>,
}

struct SendReq {
    state: *const State,
    ep: EpId,
    token: u64,
    _header: Vec<u8>,
    _payload: Vec<u8>,
    /// The gather list of a raw send, read by UCP until completion.
    _iov: Vec<sys::ucp_dt_iov_t>,
}

struct RecvReq {
    state: *const State,
    token: u64,
    buffer: Option<Vec<u8>>,
    len: usize,
    /// The scatter list of an IOV receive, read by UCP until completion.
    _iov: Vec<sys::ucp_dt_iov_t>,
}

/// Where a rendezvous payload goes: one range, or a scatter list.
enum Dest {
    Contig(*mut u8),
    Iov(Vec<sys::ucp_dt_iov_t>),
}

/// The scatter list `segments` as UCP takes it, if it holds at least `len` bytes.
fn scatter(segments: &[(*mut u8, usize)], len: usize) -> Result<Dest, Error> {
    let total = segments
        .iter()
        .try_fold(0usize, |t, &(_, l)| t.checked_add(l))
        .ok_or(Error::Invalid("the scatter list's length overflows"))?;
    if total < len {
        return Err(Error::Invalid(
            "the scatter list is shorter than the payload",
        ));
    }
    Ok(Dest::Iov(
        segments
            .iter()
            .map(|&(p, l)| sys::ucp_dt_iov_t {
                buffer: p.cast(),
                length: l,
            })
            .collect(),
    ))
}

impl State {
    fn push(&self, e: Event) {
        self.events.borrow_mut().push_back(e);
    }

    /// Handles what a non-blocking call returned: done now (the event is pushed now),
    /// failed (likewise, with the error), or in flight (its callback will).
    fn finish_request<R>(
        &self,
        r: sys::ucs_status_ptr_t,
        req: *mut R,
        call: &'static str,
        event: impl FnOnce(Box<R>, Result<(), Error>) -> Event,
    ) {
        if r.is_null() || sys::ptr_is_err(r) {
            let result = if r.is_null() {
                Ok(())
            } else {
                Err(Error::Call {
                    call,
                    status: Status(sys::ptr_status(r)),
                })
            };
            // SAFETY: UCP did not keep the request: its callback will not run, so the
            // box is ours again.
            let req = unsafe { Box::from_raw(req) };
            self.push(event(req, result));
        } else {
            self.requests.borrow_mut().insert(r as usize);
        }
    }

    fn endpoint(&self, ep: EpId) -> Result<(sys::ucp_ep_h, Option<Status>), Error> {
        let eps = self.endpoints.borrow();
        match eps.get(ep.index as usize) {
            Some(Some(s)) if s.id == ep => Ok((s.handle.get(), s.failed.get())),
            _ => Err(Error::NoSuchObject),
        }
    }
}

/// One UCP context and worker with active messages and a wake-up fd.
pub struct Worker {
    ucp: &'static Ucp,
    context: sys::ucp_context_h,
    efd: RawFd,
    state: Box<State>,
}

// SAFETY: the UCP worker is created in UCS_THREAD_MODE_SERIALIZED: any thread may use it,
// one at a time. Every use goes through `&mut Worker` (or `&Worker` methods that do not
// call UCP), every callback runs inside such a call, handlers are `Send`, and the raw
// pointers are to objects the worker owns.
unsafe impl Send for Worker {}

impl Worker {
    /// Creates a context (active messages, wake-up) and its worker; `settings` are UCP
    /// configuration values (`("TLS", "tcp")`, as `UCX_TLS=tcp` would set), applied over
    /// the `UCX_*` environment.
    pub fn new(settings: &[(&str, &str)]) -> Result<Worker, Error> {
        let ucp = Ucp::get()?;
        let mut config: *mut sys::ucp_config_t = ptr::null_mut();
        // SAFETY: null prefix and file (the defaults), a valid out pointer.
        check("ucp_config_read", unsafe {
            (ucp.ucp_config_read)(ptr::null(), ptr::null(), &mut config)
        })?;
        let mut modified = Ok(());
        for (name, value) in settings {
            let (Ok(n), Ok(v)) = (CString::new(*name), CString::new(*value)) else {
                modified = Err(Error::Invalid("a setting with a NUL byte"));
                break;
            };
            // SAFETY: a live config and NUL-terminated strings.
            modified = check("ucp_config_modify", unsafe {
                (ucp.ucp_config_modify)(config, n.as_ptr(), v.as_ptr())
            });
            if modified.is_err() {
                break;
            }
        }
        let name = c"softverbs";
        let params = sys::ucp_params_t {
            field_mask: sys::UCP_PARAM_FIELD_FEATURES | sys::UCP_PARAM_FIELD_NAME,
            features: sys::UCP_FEATURE_AM | sys::UCP_FEATURE_WAKEUP,
            request_size: 0,
            request_init: None,
            request_cleanup: None,
            tag_sender_mask: 0,
            mt_workers_shared: 0,
            estimated_num_eps: 0,
            estimated_num_ppn: 0,
            name: name.as_ptr(),
        };
        let mut context: sys::ucp_context_h = ptr::null_mut();
        let init = modified.and_then(|()| {
            // SAFETY: valid parameters and config, a valid out pointer.
            check("ucp_init", unsafe {
                (ucp.ucp_init_version)(
                    sys::UCP_API_MAJOR,
                    sys::UCP_API_MINOR,
                    &params,
                    config,
                    &mut context,
                )
            })
        });
        // SAFETY: the config is no longer needed (ucp_init copied what it uses).
        unsafe { (ucp.ucp_config_release)(config) };
        init?;
        // SAFETY: a zeroed parameter block is a valid one (no fields selected).
        let mut wp: sys::ucp_worker_params_t = unsafe { core::mem::zeroed() };
        wp.field_mask = sys::UCP_WORKER_PARAM_FIELD_THREAD_MODE;
        wp.thread_mode = sys::UCS_THREAD_MODE_SERIALIZED;
        let mut worker: sys::ucp_worker_h = ptr::null_mut();
        // SAFETY: a live context, valid parameters, a valid out pointer.
        let created = check("ucp_worker_create", unsafe {
            (ucp.ucp_worker_create)(context, &wp, &mut worker)
        });
        if let Err(e) = created {
            // SAFETY: the context made above, with no worker.
            unsafe { (ucp.ucp_cleanup)(context) };
            return Err(e);
        }
        let mut efd: RawFd = -1;
        // SAFETY: a live worker of a context with UCP_FEATURE_WAKEUP.
        let got = check("ucp_worker_get_efd", unsafe {
            (ucp.ucp_worker_get_efd)(worker, &mut efd)
        });
        if let Err(e) = got {
            // SAFETY: the worker and context made above, in that order.
            unsafe {
                (ucp.ucp_worker_destroy)(worker);
                (ucp.ucp_cleanup)(context);
            }
            return Err(e);
        }
        Ok(Worker {
            ucp,
            context,
            efd,
            state: Box::new(State {
                ucp,
                worker,
                events: RefCell::new(VecDeque::new()),
                endpoints: RefCell::new(Vec::new()),
                generation: Cell::new(0),
                by_handle: RefCell::new(HashMap::new()),
                listeners: RefCell::new(Vec::new()),
                handlers: RefCell::new(Vec::new()),
                closing: RefCell::new(Vec::new()),
                requests: RefCell::new(HashSet::new()),
                panicked: Cell::new(false),
                dropped: Cell::new(0),
                deferred: RefCell::new(HashSet::new()),
                keep: Cell::new(false),
            }),
        })
    }

    /// The fd that becomes readable when the worker has work, after [`Worker::arm`]
    /// returned `true` (`ucp_worker_get_efd`). Owned by the worker.
    pub fn event_fd(&self) -> RawFd {
        self.efd
    }

    /// Arms the event fd: `true` when it is armed (nothing to do until it is readable),
    /// `false` when events are pending and [`Worker::progress`] should run first.
    pub fn arm(&mut self) -> Result<bool, Error> {
        // SAFETY: a live worker.
        match unsafe { (self.ucp.ucp_worker_arm)(self.state.worker) } {
            sys::UCS_OK => Ok(true),
            sys::UCS_ERR_BUSY => Ok(false),
            s => Err(Error::Call {
                call: "ucp_worker_arm",
                status: Status(s),
            }),
        }
    }

    /// Runs UCP's progress once: its callbacks run, queueing events and calling
    /// handlers. Returns how much UCP did (0: nothing), or [`Error::HandlerPanicked`]
    /// when a handler panicked meanwhile.
    pub fn progress(&mut self) -> Result<usize, Error> {
        // SAFETY: a live worker; callbacks reach `state` through their own pointers.
        let n = unsafe { (self.ucp.ucp_worker_progress)(self.state.worker) } as usize;
        self.reap_closing();
        if self.state.panicked.replace(false) {
            return Err(Error::HandlerPanicked);
        }
        Ok(n)
    }

    /// Progresses until something happened or `timeout` passed, sleeping on the event
    /// fd in between. Returns whether an event is queued.
    pub fn wait(&mut self, timeout: Duration) -> Result<bool, Error> {
        let deadline = Instant::now() + timeout;
        loop {
            while self.progress()? > 0 {}
            if !self.state.events.borrow().is_empty() {
                return Ok(true);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(false);
            }
            if !self.arm()? {
                continue;
            }
            let mut pfd = libc::pollfd {
                fd: self.efd,
                events: libc::POLLIN,
                revents: 0,
            };
            let ms = left.as_millis().clamp(1, 100) as libc::c_int;
            // SAFETY: one valid pollfd.
            unsafe { libc::poll(&mut pfd, 1, ms) };
        }
    }

    /// The next event, if any.
    pub fn next_event(&mut self) -> Option<Event> {
        self.state.events.borrow_mut().pop_front()
    }

    /// Messages dropped because their handler was running already.
    pub fn dropped_messages(&self) -> u64 {
        self.state.dropped.get()
    }

    /// Calls `handler` for every active message with `id` (< [`MAX_AM_ID`]), replacing
    /// the previous handler of that id.
    pub fn set_handler(
        &mut self,
        id: u16,
        handler: impl FnMut(AmMessage<'_>) + Send + 'static,
    ) -> Result<(), Error> {
        if id >= MAX_AM_ID {
            return Err(Error::Invalid("an active message id past MAX_AM_ID"));
        }
        let state: &State = &self.state;
        let handler: Handler = Box::new(handler);
        let (arg, fresh) = {
            let mut hs = state.handlers.borrow_mut();
            if hs.len() <= id as usize {
                hs.resize_with(id as usize + 1, || None);
            }
            let fresh = hs[id as usize].is_none();
            let slot = hs[id as usize].get_or_insert_with(|| {
                Box::new(HandlerSlot {
                    state: state as *const State,
                    handler: RefCell::new(None),
                })
            });
            *slot.handler.borrow_mut() = Some(handler);
            (&**slot as *const HandlerSlot, fresh)
        };
        if !fresh {
            return Ok(());
        }
        let param = sys::ucp_am_handler_param_t {
            field_mask: sys::UCP_AM_HANDLER_PARAM_FIELD_ID
                | sys::UCP_AM_HANDLER_PARAM_FIELD_FLAGS
                | sys::UCP_AM_HANDLER_PARAM_FIELD_CB
                | sys::UCP_AM_HANDLER_PARAM_FIELD_ARG,
            id: id.into(),
            flags: sys::UCP_AM_FLAG_WHOLE_MSG,
            cb: Some(am_received),
            arg: arg as *mut c_void,
        };
        // SAFETY: a live worker; `arg` is a boxed slot kept until the worker is
        // destroyed.
        check("ucp_worker_set_am_recv_handler", unsafe {
            (self.ucp.ucp_worker_set_am_recv_handler)(state.worker, &param)
        })
    }

    /// Listens on `addr` (port 0: one the kernel picks); [`Worker::listener_addr`] says
    /// which. Each peer that connects is an [`Event::ConnRequest`].
    pub fn listen(&mut self, addr: SocketAddr) -> Result<ListenerId, Error> {
        let (storage, len) = to_storage(addr);
        let state: &State = &self.state;
        let id = {
            let mut ls = state.listeners.borrow_mut();
            let index = ls.iter().position(Option::is_none).unwrap_or(ls.len());
            if index == ls.len() {
                ls.push(None);
            }
            let id = ListenerId(index as u32);
            ls[index] = Some(Box::new(ListenerSlot {
                state: state as *const State,
                id,
                handle: Cell::new(ptr::null_mut()),
            }));
            id
        };
        let arg: *const ListenerSlot = {
            let ls = state.listeners.borrow();
            &**ls[id.0 as usize].as_ref().expect("made above")
        };
        let params = sys::ucp_listener_params_t {
            field_mask: sys::UCP_LISTENER_PARAM_FIELD_SOCK_ADDR
                | sys::UCP_LISTENER_PARAM_FIELD_CONN_HANDLER,
            sockaddr: sys::ucs_sock_addr_t {
                addr: (&storage as *const libc::sockaddr_storage).cast(),
                addrlen: len,
            },
            accept_handler: [ptr::null_mut(); 2],
            conn_handler: sys::ucp_listener_conn_handler_t {
                cb: Some(conn_requested),
                arg: arg as *mut c_void,
            },
        };
        let mut handle: sys::ucp_listener_h = ptr::null_mut();
        // SAFETY: a live worker, parameters and address valid for the call, a slot
        // that lives until the listener is destroyed.
        let made = check("ucp_listener_create", unsafe {
            (self.ucp.ucp_listener_create)(state.worker, &params, &mut handle)
        });
        let ls = state.listeners.borrow_mut();
        match made {
            Ok(()) => {
                ls[id.0 as usize]
                    .as_ref()
                    .expect("made above")
                    .handle
                    .set(handle);
                Ok(id)
            }
            Err(e) => {
                drop(ls);
                state.listeners.borrow_mut()[id.0 as usize] = None;
                Err(e)
            }
        }
    }

    /// The address a listener is bound to (with the port the kernel picked).
    pub fn listener_addr(&self, id: ListenerId) -> Result<SocketAddr, Error> {
        let handle = self.listener(id)?;
        // SAFETY: a zeroed attribute block is valid; only its field mask is read.
        let mut attr: sys::ucp_listener_attr_t = unsafe { core::mem::zeroed() };
        attr.field_mask = sys::UCP_LISTENER_ATTR_FIELD_SOCKADDR;
        // SAFETY: a live listener and a writable attribute block.
        check("ucp_listener_query", unsafe {
            (self.ucp.ucp_listener_query)(handle, &mut attr)
        })?;
        from_storage(&attr.sockaddr).ok_or(Error::Invalid("the listener's address family"))
    }

    /// Stops listening. Connection requests not yet accepted are refused by UCP.
    pub fn close_listener(&mut self, id: ListenerId) -> Result<(), Error> {
        let handle = self.listener(id)?;
        // SAFETY: a live listener, destroyed once (its slot is cleared next).
        unsafe { (self.ucp.ucp_listener_destroy)(handle) };
        self.state.listeners.borrow_mut()[id.0 as usize] = None;
        Ok(())
    }

    fn listener(&self, id: ListenerId) -> Result<sys::ucp_listener_h, Error> {
        match self.state.listeners.borrow().get(id.0 as usize) {
            Some(Some(s)) if !s.handle.get().is_null() => Ok(s.handle.get()),
            _ => Err(Error::NoSuchObject),
        }
    }

    /// Connects to a listener at `addr`. The endpoint is usable at once (sends queue
    /// until the connection is up); a peer that refuses, is absent or dies later is an
    /// [`Event::EndpointFailed`].
    pub fn connect(&mut self, addr: SocketAddr) -> Result<EpId, Error> {
        let (storage, len) = to_storage(addr);
        self.make_endpoint(|params| {
            params.field_mask |= sys::UCP_EP_PARAM_FIELD_FLAGS | sys::UCP_EP_PARAM_FIELD_SOCK_ADDR;
            params.flags = sys::UCP_EP_PARAMS_FLAGS_CLIENT_SERVER;
            params.sockaddr = sys::ucs_sock_addr_t {
                addr: (&storage as *const libc::sockaddr_storage).cast(),
                addrlen: len,
            };
        })
    }

    /// Accepts a connection request: an endpoint to that peer.
    pub fn accept(&mut self, req: ConnRequest) -> Result<EpId, Error> {
        self.listener(req.listener)?;
        self.make_endpoint(|params| {
            params.field_mask |= sys::UCP_EP_PARAM_FIELD_CONN_REQUEST;
            params.conn_request = req.raw;
        })
    }

    /// Refuses a connection request.
    pub fn reject(&mut self, req: ConnRequest) -> Result<(), Error> {
        let listener = self.listener(req.listener)?;
        // SAFETY: a live listener and the request it handed out, consumed here.
        check("ucp_listener_reject", unsafe {
            (self.ucp.ucp_listener_reject)(listener, req.raw)
        })
    }

    fn make_endpoint(
        &mut self,
        set: impl FnOnce(&mut sys::ucp_ep_params_t),
    ) -> Result<EpId, Error> {
        let state: &State = &self.state;
        let generation = state.generation.get().wrapping_add(1);
        state.generation.set(generation);
        let id = {
            let mut eps = state.endpoints.borrow_mut();
            let index = eps.iter().position(Option::is_none).unwrap_or(eps.len());
            if index == eps.len() {
                eps.push(None);
            }
            let id = EpId {
                index: index as u32,
                generation,
            };
            eps[index] = Some(Box::new(EpSlot {
                state: state as *const State,
                id,
                handle: Cell::new(ptr::null_mut()),
                failed: Cell::new(None),
            }));
            id
        };
        let arg: *const EpSlot = {
            let eps = state.endpoints.borrow();
            &**eps[id.index as usize].as_ref().expect("made above")
        };
        // SAFETY: a zeroed parameter block is valid (no fields selected).
        let mut params: sys::ucp_ep_params_t = unsafe { core::mem::zeroed() };
        params.field_mask =
            sys::UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | sys::UCP_EP_PARAM_FIELD_ERR_HANDLER;
        params.err_mode = sys::UCP_ERR_HANDLING_MODE_PEER;
        params.err_handler = sys::ucp_err_handler_t {
            cb: Some(endpoint_failed),
            arg: arg as *mut c_void,
        };
        set(&mut params);
        let mut ep: sys::ucp_ep_h = ptr::null_mut();
        // SAFETY: a live worker, parameters valid for the call, a slot that lives until
        // the endpoint is closed.
        let made = check("ucp_ep_create", unsafe {
            (self.ucp.ucp_ep_create)(state.worker, &params, &mut ep)
        });
        match made {
            Ok(()) => {
                let eps = state.endpoints.borrow();
                eps[id.index as usize]
                    .as_ref()
                    .expect("made above")
                    .handle
                    .set(ep);
                state.by_handle.borrow_mut().insert(ep as usize, id);
                Ok(id)
            }
            Err(e) => {
                state.endpoints.borrow_mut()[id.index as usize] = None;
                Err(e)
            }
        }
    }

    /// The error an endpoint failed with, if it did.
    pub fn endpoint_error(&self, ep: EpId) -> Result<Option<Error>, Error> {
        let (_, failed) = self.state.endpoint(ep)?;
        Ok(failed.map(Error::EndpointFailed))
    }

    /// Sends active message `id` with `header` (at most [`MAX_HEADER`] bytes) and
    /// `payload` on `ep`. Exactly one [`Event::Sent`] with `token` follows, once UCP is
    /// done with the buffers (which the worker keeps until then); an endpoint that has
    /// failed refuses at once.
    pub fn am_send(
        &mut self,
        ep: EpId,
        id: u16,
        header: &[u8],
        payload: Vec<u8>,
        token: u64,
    ) -> Result<(), Error> {
        // SAFETY: the payload is owned by the request, which lives until completion.
        unsafe { self.send(ep, id, header, payload, &[], token) }
    }

    /// Sends active message `id` with `header` and a payload gathered from `segments`
    /// (pointer, length) in order, without copying it; otherwise as [`Worker::am_send`].
    ///
    /// # Safety
    /// Every segment is readable for its length and is not written until the
    /// [`Event::Sent`] with `token` is taken from the worker (or the worker is dropped).
    pub unsafe fn am_send_raw(
        &mut self,
        ep: EpId,
        id: u16,
        header: &[u8],
        segments: &[(*const u8, usize)],
        token: u64,
    ) -> Result<(), Error> {
        // SAFETY: the caller's contract.
        unsafe { self.send(ep, id, header, Vec::new(), segments, token) }
    }

    /// # Safety
    /// `segments` (used when `payload` is empty) as [`Worker::am_send_raw`] requires.
    unsafe fn send(
        &mut self,
        ep: EpId,
        id: u16,
        header: &[u8],
        payload: Vec<u8>,
        segments: &[(*const u8, usize)],
        token: u64,
    ) -> Result<(), Error> {
        if id >= MAX_AM_ID {
            return Err(Error::Invalid("an active message id past MAX_AM_ID"));
        }
        if header.len() > MAX_HEADER {
            return Err(Error::Invalid("a header longer than MAX_HEADER"));
        }
        let state: &State = &self.state;
        let (handle, failed) = state.endpoint(ep)?;
        if let Some(s) = failed {
            return Err(Error::EndpointFailed(s));
        }
        let req = Box::new(SendReq {
            state: state as *const State,
            ep,
            token,
            _header: header.to_vec(),
            _payload: payload,
            _iov: segments
                .iter()
                .map(|&(p, l)| sys::ucp_dt_iov_t {
                    buffer: p.cast_mut().cast(),
                    length: l,
                })
                .collect(),
        });
        let (h, hl) = (req._header.as_ptr(), req._header.len());
        let (datatype, p, pl) = if segments.is_empty() {
            let (p, l) = (req._payload.as_ptr().cast::<c_void>(), req._payload.len());
            (sys::UCP_DATATYPE_BYTES, p, l)
        } else {
            let (p, l) = (req._iov.as_ptr().cast::<c_void>(), req._iov.len());
            (sys::UCP_DATATYPE_IOV, p, l)
        };
        let req = Box::into_raw(req);
        let mut param = sys::ucp_request_param_t::empty();
        param.op_attr_mask = sys::UCP_OP_ATTR_FIELD_CALLBACK
            | sys::UCP_OP_ATTR_FIELD_USER_DATA
            | sys::UCP_OP_ATTR_FIELD_DATATYPE
            | sys::UCP_OP_ATTR_FIELD_FLAGS;
        param.flags = sys::UCP_AM_SEND_FLAG_REPLY;
        param.cb.send = Some(send_done);
        param.user_data = req.cast();
        param.datatype = datatype;
        // SAFETY: a live endpoint; header, payload and gather list are heap buffers
        // owned by the request box, which lives until the completion callback (or is
        // taken back below when UCP kept nothing); the segments are the caller's
        // contract.
        let r =
            unsafe { (self.ucp.ucp_am_send_nbx)(handle, id.into(), h.cast(), hl, p, pl, &param) };
        state.finish_request(r, req, "ucp_am_send_nbx", |req, result| Event::Sent {
            ep: req.ep,
            token: req.token,
            result,
        });
        Ok(())
    }

    /// Fetches a deferred payload into `buffer` (at least [`Deferred::len`] bytes);
    /// [`Event::Received`] with `token` gives the buffer back.
    pub fn receive_deferred(
        &mut self,
        d: Deferred,
        mut buffer: Vec<u8>,
        token: u64,
    ) -> Result<(), Error> {
        if buffer.len() < d.len {
            return Err(Error::Invalid(
                "the receive buffer is shorter than the payload",
            ));
        }
        self.take_deferred(&d)?;
        let p = buffer.as_mut_ptr();
        // SAFETY: a descriptor of this worker's handlers, consumed once (it left the
        // set); `buffer` moves into the request and outlives it.
        unsafe {
            fetch(
                &self.state,
                d.desc as *mut c_void,
                d.len,
                Dest::Contig(p),
                Some(buffer),
                token,
            )
        };
        Ok(())
    }

    /// Fetches a deferred payload into [`Deferred::len`] bytes at `dest`;
    /// [`Event::Received`] with `token` says when.
    ///
    /// # Safety
    /// As [`Rndv::receive_raw`]: `dest` is writable for `len` bytes until that event is
    /// taken (or the worker is dropped), and nothing else accesses it meanwhile.
    pub unsafe fn receive_deferred_raw(
        &mut self,
        d: Deferred,
        dest: *mut u8,
        token: u64,
    ) -> Result<(), Error> {
        self.take_deferred(&d)?;
        // SAFETY: a descriptor of this worker, consumed once; the caller vouches for
        // `dest`.
        unsafe {
            fetch(
                &self.state,
                d.desc as *mut c_void,
                d.len,
                Dest::Contig(dest),
                None,
                token,
            )
        };
        Ok(())
    }

    /// Fetches a deferred payload into the scatter list `segments`, as
    /// [`Rndv::receive_iov_raw`].
    ///
    /// # Safety
    /// As [`Rndv::receive_raw`], for every segment.
    pub unsafe fn receive_deferred_iov_raw(
        &mut self,
        d: Deferred,
        segments: &[(*mut u8, usize)],
        token: u64,
    ) -> Result<(), Error> {
        let dest = scatter(segments, d.len)?;
        self.take_deferred(&d)?;
        // SAFETY: a descriptor of this worker, consumed once; the caller vouches for
        // the segments.
        unsafe { fetch(&self.state, d.desc as *mut c_void, d.len, dest, None, token) };
        Ok(())
    }

    /// Discards a deferred payload; the sender's send completes.
    pub fn release(&mut self, d: Deferred) -> Result<(), Error> {
        self.take_deferred(&d)?;
        // SAFETY: a descriptor of this worker, released once (it left the set).
        unsafe { (self.ucp.ucp_am_data_release)(self.state.worker, d.desc as *mut c_void) };
        Ok(())
    }

    fn take_deferred(&self, d: &Deferred) -> Result<(), Error> {
        if self.state.deferred.borrow_mut().remove(&d.desc) {
            Ok(())
        } else {
            Err(Error::NoSuchObject)
        }
    }

    /// Closes an endpoint: gracefully (its sends flushed) while it is healthy, at once
    /// when it failed. Its id names nothing afterwards; sends still in flight complete
    /// with an error.
    pub fn close(&mut self, ep: EpId) -> Result<(), Error> {
        let state: &State = &self.state;
        let slot = {
            let mut eps = state.endpoints.borrow_mut();
            match eps.get_mut(ep.index as usize) {
                Some(s @ Some(_)) if s.as_ref().is_some_and(|s| s.id == ep) => s.take(),
                _ => None,
            }
        };
        let Some(slot) = slot else {
            return Err(Error::NoSuchObject);
        };
        let force = slot.failed.get().is_some();
        self.start_close(slot, force);
        Ok(())
    }

    fn start_close(&self, slot: Box<EpSlot>, force: bool) {
        let state: &State = &self.state;
        let handle = slot.handle.get();
        state.by_handle.borrow_mut().remove(&(handle as usize));
        let mut param = sys::ucp_request_param_t::empty();
        if force {
            param.op_attr_mask = sys::UCP_OP_ATTR_FIELD_FLAGS;
            param.flags = sys::UCP_EP_CLOSE_FLAG_FORCE;
        }
        // SAFETY: a live endpoint, closed once (its slot left the table).
        let r = unsafe { (self.ucp.ucp_ep_close_nbx)(handle, &param) };
        if !r.is_null() && !sys::ptr_is_err(r) {
            state.closing.borrow_mut().push((r, slot));
        }
        // Done or failed at once: UCP has released the endpoint; the slot drops.
    }

    /// Frees the slots of endpoints whose close completed.
    fn reap_closing(&mut self) {
        let ucp = self.ucp;
        self.state.closing.borrow_mut().retain(|(req, _)| {
            // SAFETY: a request UCP returned and we have not freed.
            let s = unsafe { (ucp.ucp_request_check_status)(*req) };
            if s == sys::UCS_INPROGRESS {
                return true;
            }
            // SAFETY: completed; freed once.
            unsafe { (ucp.ucp_request_free)(*req) };
            false
        });
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        let held: Vec<usize> = self.state.deferred.borrow_mut().drain().collect();
        for d in held {
            // SAFETY: descriptors of this worker nobody consumed, released once.
            unsafe { (self.ucp.ucp_am_data_release)(self.state.worker, d as *mut c_void) };
        }
        // Every endpoint closed at once; sends in flight complete (cancelled).
        let slots: Vec<Box<EpSlot>> = self
            .state
            .endpoints
            .borrow_mut()
            .iter_mut()
            .filter_map(Option::take)
            .collect();
        for s in slots {
            self.start_close(s, true);
        }
        let deadline = Instant::now() + Duration::from_secs(2);
        // Sends and receives are cancelled by the forced closes and complete at the next
        // progress; a graceful close begun earlier is not waited for (it waits on the
        // peer), UCP ends it when the worker is destroyed.
        while !self.state.requests.borrow().is_empty() && Instant::now() < deadline {
            let _ = self.progress();
        }
        // Past the deadline, what is still in flight is released to UCP, which completes
        // (cancels) it when the worker is destroyed; a callback that runs then finds
        // its request gone from the set and does not free it again.
        let left: Vec<usize> = self.state.requests.borrow_mut().drain().collect();
        let closing: Vec<(*mut c_void, Box<EpSlot>)> =
            self.state.closing.borrow_mut().drain(..).collect();
        for r in left
            .into_iter()
            .map(|r| r as *mut c_void)
            .chain(closing.iter().map(|(r, _)| *r))
        {
            // SAFETY: requests UCP returned and nobody has freed; freed once here.
            unsafe { (self.ucp.ucp_request_free)(r) };
        }
        let listeners: Vec<sys::ucp_listener_h> = self
            .state
            .listeners
            .borrow_mut()
            .iter_mut()
            .filter_map(Option::take)
            .map(|l| l.handle.get())
            .collect();
        for l in listeners {
            // SAFETY: live listeners, each destroyed once.
            unsafe { (self.ucp.ucp_listener_destroy)(l) };
        }
        // The boxes of requests released above are leaked if their callbacks never run.
        // SAFETY: the worker and its context, destroyed once, the worker first; no
        // callback runs after this.
        unsafe {
            (self.ucp.ucp_worker_destroy)(self.state.worker);
            (self.ucp.ucp_cleanup)(self.context);
        }
        // The endpoint slots of unfinished closes go only now: UCP called their error
        // handlers until the worker was destroyed.
        drop(closing);
    }
}

/// Runs `f`, turning a panic into the state's flag: nothing unwinds into C.
fn guarded<R>(state: *const State, default: R, f: impl FnOnce() -> R) -> R {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(_) => {
            // SAFETY: the state outlives every callback (they run inside worker calls).
            if let Some(s) = unsafe { state.as_ref() } {
                s.panicked.set(true);
            }
            default
        }
    }
}

/// `ucp_send_nbx_callback_t` of [`Worker::am_send`].
unsafe extern "C" fn send_done(request: *mut c_void, status: sys::ucs_status_t, user: *mut c_void) {
    let req = user.cast::<SendReq>();
    // SAFETY: `user` is the box `am_send` leaked for this request; read before use.
    let state = unsafe { (*req).state };
    guarded(state, (), || {
        // SAFETY: the box is ours again: UCP calls this once.
        let req = unsafe { Box::from_raw(req) };
        // SAFETY: the worker's state outlives its callbacks.
        let st = unsafe { &*req.state };
        let ours = st.requests.borrow_mut().remove(&(request as usize));
        let result = if status == sys::UCS_OK {
            Ok(())
        } else {
            Err(Error::Call {
                call: "ucp_am_send_nbx",
                status: Status(status),
            })
        };
        st.push(Event::Sent {
            ep: req.ep,
            token: req.token,
            result,
        });
        if ours {
            // SAFETY: a request UCP returned, complete now, freed once (the drop frees
            // only those still in the set).
            unsafe { (st.ucp.ucp_request_free)(request) };
        }
    })
}

/// `ucp_am_recv_data_nbx_callback_t` of [`Rndv::receive`].
unsafe extern "C" fn recv_done(
    request: *mut c_void,
    status: sys::ucs_status_t,
    _length: usize,
    user: *mut c_void,
) {
    let req = user.cast::<RecvReq>();
    // SAFETY: `user` is the box `Rndv::start` leaked for this request.
    let state = unsafe { (*req).state };
    guarded(state, (), || {
        // SAFETY: the box is ours again: UCP calls this once.
        let req = unsafe { Box::from_raw(req) };
        // SAFETY: the worker's state outlives its callbacks.
        let st = unsafe { &*req.state };
        let ours = st.requests.borrow_mut().remove(&(request as usize));
        let result = if status == sys::UCS_OK {
            Ok(req.len)
        } else {
            Err(Error::Call {
                call: "ucp_am_recv_data_nbx",
                status: Status(status),
            })
        };
        let req = *req;
        st.push(Event::Received {
            token: req.token,
            buffer: req.buffer,
            result,
        });
        if ours {
            // SAFETY: a request UCP returned, complete now, freed once (the drop frees
            // only those still in the set).
            unsafe { (st.ucp.ucp_request_free)(request) };
        }
    })
}

/// `ucp_err_handler_cb_t` of every endpoint.
unsafe extern "C" fn endpoint_failed(
    arg: *mut c_void,
    _ep: sys::ucp_ep_h,
    status: sys::ucs_status_t,
) {
    let slot = arg.cast::<EpSlot>().cast_const();
    // SAFETY: the slot lives until its endpoint is closed, after which UCP calls no
    // error handler of it.
    let slot = unsafe { &*slot };
    guarded(slot.state, (), || {
        if slot.failed.get().is_none() {
            slot.failed.set(Some(Status(status)));
            // SAFETY: the worker's state outlives its callbacks.
            let st = unsafe { &*slot.state };
            st.push(Event::EndpointFailed {
                ep: slot.id,
                error: Error::EndpointFailed(Status(status)),
            });
        }
    })
}

/// `ucp_listener_conn_callback_t` of every listener.
unsafe extern "C" fn conn_requested(req: sys::ucp_conn_request_h, arg: *mut c_void) {
    let slot = arg.cast::<ListenerSlot>().cast_const();
    // SAFETY: the slot lives until its listener is destroyed.
    let slot = unsafe { &*slot };
    guarded(slot.state, (), || {
        // SAFETY: the worker's state outlives its callbacks.
        let st = unsafe { &*slot.state };
        // SAFETY: a zeroed attribute block is valid; only its field mask is read.
        let mut attr: sys::ucp_conn_request_attr_t = unsafe { core::mem::zeroed() };
        attr.field_mask = sys::UCP_CONN_REQUEST_ATTR_FIELD_CLIENT_ADDR;
        // SAFETY: the live request UCP just handed us and a writable block.
        let q = unsafe { (st.ucp.ucp_conn_request_query)(req, &mut attr) };
        let peer = if q == sys::UCS_OK {
            from_storage(&attr.client_address)
        } else {
            None
        };
        st.push(Event::ConnRequest(ConnRequest {
            raw: req,
            listener: slot.id,
            peer,
        }));
    })
}

/// `ucp_am_recv_callback_t` of every handler.
unsafe extern "C" fn am_received(
    arg: *mut c_void,
    header: *const c_void,
    header_length: usize,
    data: *mut c_void,
    length: usize,
    param: *const sys::ucp_am_recv_param_t,
) -> sys::ucs_status_t {
    let slot = arg.cast::<HandlerSlot>().cast_const();
    // SAFETY: handler slots live as long as the worker.
    let slot = unsafe { &*slot };
    guarded(slot.state, sys::UCS_OK, || {
        // SAFETY: the worker's state outlives its callbacks.
        let st = unsafe { &*slot.state };
        // SAFETY: UCP passes a valid parameter block.
        let param = unsafe { &*param };
        let header = if header_length == 0 || header.is_null() {
            &[][..]
        } else {
            // SAFETY: UCP's header, `header_length` bytes, valid during the callback.
            unsafe { core::slice::from_raw_parts(header.cast::<u8>(), header_length) }
        };
        let data = if param.recv_attr & sys::UCP_AM_RECV_ATTR_FLAG_RNDV != 0 {
            Data::Rendezvous(Rndv {
                state: st,
                desc: data,
                len: length,
            })
        } else if length == 0 || data.is_null() {
            Data::Eager(&[])
        } else {
            // SAFETY: the payload, `length` bytes, valid during the callback.
            Data::Eager(unsafe { core::slice::from_raw_parts(data.cast::<u8>(), length) })
        };
        let from = if param.recv_attr & sys::UCP_AM_RECV_ATTR_FIELD_REPLY_EP != 0 {
            st.by_handle
                .borrow()
                .get(&(param.reply_ep as usize))
                .copied()
        } else {
            None
        };
        let Some(mut handler) = slot.handler.borrow_mut().take() else {
            st.dropped.set(st.dropped.get() + 1);
            return sys::UCS_OK;
        };
        // The handler is kept after a panic: one bad message does not silence its id.
        st.keep.set(false);
        let run = catch_unwind(AssertUnwindSafe(|| {
            handler(AmMessage { header, data, from })
        }));
        slot.handler.borrow_mut().get_or_insert(handler);
        if run.is_err() {
            st.panicked.set(true);
        }
        // A deferred descriptor stays UCP's until it is fetched or released.
        if st.keep.replace(false) {
            sys::UCS_INPROGRESS
        } else {
            sys::UCS_OK
        }
    })
}
