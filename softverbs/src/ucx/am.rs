//! Active messages through a [`Worker`]: handlers and the messages they get (eager
//! data, rendezvous payloads to fetch, keep or drop), sends from owned buffers or
//! segment lists, and the UCP callbacks of both.

use core::ffi::c_void;
use std::cell::RefCell;
use std::panic::{catch_unwind, AssertUnwindSafe};

use super::error::{check, Error, Status};
use super::sys;
use super::worker::{guarded, Event, State, Worker};
use super::{EpId, Handler, HandlerSlot, MAX_AM_ID, MAX_HEADER};

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
    pub(super) state: &'a State,
    pub(super) desc: *mut c_void,
    pub(super) len: usize,
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
    pub(super) unsafe fn start(
        self,
        dest: *mut u8,
        buffer: Option<Vec<u8>>,
        token: u64,
    ) -> Result<(), Error> {
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
    pub(super) desc: usize,
    pub(super) len: usize,
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
pub(super) unsafe fn fetch(
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
    pub(super) header: &'a [u8],
    pub(super) data: Data<'a>,
    pub(super) from: Option<EpId>,
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

pub(super) struct SendReq {
    pub(super) state: *const State,
    pub(super) ep: EpId,
    pub(super) token: u64,
    pub(super) _header: Vec<u8>,
    /// The payload of an owned send, given back with [`Event::Sent`].
    pub(super) payload: Vec<u8>,
    /// The gather list of a raw send, read by UCP until completion.
    pub(super) _iov: Vec<sys::ucp_dt_iov_t>,
}

pub(super) struct RecvReq {
    pub(super) state: *const State,
    pub(super) token: u64,
    pub(super) buffer: Option<Vec<u8>>,
    pub(super) len: usize,
    /// The scatter list of an IOV receive, read by UCP until completion.
    pub(super) _iov: Vec<sys::ucp_dt_iov_t>,
}

/// Where a rendezvous payload goes: one range, or a scatter list.
pub(super) enum Dest {
    Contig(*mut u8),
    Iov(Vec<sys::ucp_dt_iov_t>),
}

/// The scatter list `segments` as UCP takes it, if it holds at least `len` bytes.
pub(super) fn scatter(segments: &[(*mut u8, usize)], len: usize) -> Result<Dest, Error> {
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

impl Worker {
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
    pub(super) unsafe fn send(
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
            payload,
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
            let (p, l) = (req.payload.as_ptr().cast::<c_void>(), req.payload.len());
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
            buffer: req.payload,
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

    pub(super) fn take_deferred(&self, d: &Deferred) -> Result<(), Error> {
        if self.state.deferred.borrow_mut().remove(&d.desc) {
            Ok(())
        } else {
            Err(Error::NoSuchObject)
        }
    }
}

/// `ucp_send_nbx_callback_t` of [`Worker::am_send`].
pub(super) unsafe extern "C" fn send_done(
    request: *mut c_void,
    status: sys::ucs_status_t,
    user: *mut c_void,
) {
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
        let SendReq {
            ep, token, payload, ..
        } = *req;
        st.push(Event::Sent {
            ep,
            token,
            result,
            buffer: payload,
        });
        if ours {
            // SAFETY: a request UCP returned, complete now, freed once (the drop frees
            // only those still in the set).
            unsafe { (st.ucp.ucp_request_free)(request) };
        }
    })
}

/// `ucp_am_recv_data_nbx_callback_t` of [`Rndv::receive`].
pub(super) unsafe extern "C" fn recv_done(
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

/// `ucp_am_recv_callback_t` of every handler.
pub(super) unsafe extern "C" fn am_received(
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
