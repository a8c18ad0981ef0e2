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
use std::os::fd::RawFd;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr;
use std::time::{Duration, Instant};

use super::error::{check, Error, Status};
use super::sys::{self, Ucp};
use super::{ConnRequest, EpId, EpSlot, HandlerSlot, ListenerSlot};

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
        /// The payload [`Worker::am_send`] was given, back for another send (empty
        /// for a raw send).
        buffer: Vec<u8>,
    },
    /// A rendezvous receive started with [`Rndv::receive`](super::Rndv::receive) or [`Rndv::receive_raw`](super::Rndv::receive_raw)
    /// completed.
    Received {
        /// The caller's token.
        token: u64,
        /// The buffer given to [`Rndv::receive`](super::Rndv::receive), now holding the data.
        buffer: Option<Vec<u8>>,
        /// The length received.
        result: Result<usize, Error>,
    },
}

/// The worker's state, reached from the callbacks through the pointers they were given.
pub(super) struct State {
    pub(super) ucp: &'static Ucp,
    pub(super) worker: sys::ucp_worker_h,
    pub(super) events: RefCell<VecDeque<Event>>,
    pub(super) endpoints: RefCell<Vec<Option<Box<EpSlot>>>>,
    pub(super) generation: Cell<u32>,
    pub(super) by_handle: RefCell<HashMap<usize, EpId>>,
    pub(super) listeners: RefCell<Vec<Option<Box<ListenerSlot>>>>,
    pub(super) handlers: RefCell<Vec<Option<Box<HandlerSlot>>>>,
    /// Close requests in flight: the request and the slot it frees.
    pub(super) closing: RefCell<Vec<(*mut c_void, Box<EpSlot>)>>,
    /// Requests whose callback has not run yet. A callback frees its request only if it
    /// is still here: past the drop's deadline the worker frees (releases) them itself.
    pub(super) requests: RefCell<HashSet<usize>>,
    /// A handler panicked since the last progress call.
    pub(super) panicked: Cell<bool>,
    /// Messages dropped because their handler was already running (a re-entered
    /// handler: a message to itself).
    pub(super) dropped: Cell<u64>,
    /// Rendezvous descriptors kept past their handler ([`Deferred`](super::Deferred)).
    pub(super) deferred: RefCell<HashSet<usize>>,
    /// Set by [`Rndv::defer`](super::Rndv::defer) during a handler: the handler returns
    /// `UCS_INPROGRESS`.
    pub(super) keep: Cell<bool>,
}

impl State {
    pub(super) fn push(&self, e: Event) {
        self.events.borrow_mut().push_back(e);
    }

    /// Handles what a non-blocking call returned: done now (the event is pushed now),
    /// failed (likewise, with the error), or in flight (its callback will).
    pub(super) fn finish_request<R>(
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

    pub(super) fn endpoint(&self, ep: EpId) -> Result<(sys::ucp_ep_h, Option<Status>), Error> {
        let eps = self.endpoints.borrow();
        match eps.get(ep.index as usize) {
            Some(Some(s)) if s.id == ep => Ok((s.handle.get(), s.failed.get())),
            _ => Err(Error::NoSuchObject),
        }
    }
}

/// One UCP context and worker with active messages and a wake-up fd.
pub struct Worker {
    pub(super) ucp: &'static Ucp,
    pub(super) context: sys::ucp_context_h,
    pub(super) efd: RawFd,
    pub(super) state: Box<State>,
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

    /// Sends and receives UCP still works on (their completion callbacks have not run):
    /// while there are any, someone must progress the worker.
    pub fn requests_in_flight(&self) -> usize {
        self.state.requests.borrow().len()
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
pub(super) fn guarded<R>(state: *const State, default: R, f: impl FnOnce() -> R) -> R {
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
