//! Endpoints and listeners of a [`Worker`]: connecting to a socket address, listening
//! on one, accepting or refusing peers, closing; and the two UCP callbacks that report
//! a connection request and an endpoint's failure.

use core::ffi::c_void;
use std::cell::Cell;
use std::net::SocketAddr;
use std::ptr;

use super::error::{check, Error, Status};
use super::sockaddr::{from_storage, to_storage};
use super::sys;
use super::worker::{guarded, Event, State, Worker};
use super::{ConnRequest, EpId, EpSlot, ListenerId, ListenerSlot};

impl Worker {
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

    pub(super) fn listener(&self, id: ListenerId) -> Result<sys::ucp_listener_h, Error> {
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

    pub(super) fn make_endpoint(
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

    pub(super) fn start_close(&self, slot: Box<EpSlot>, force: bool) {
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
    pub(super) fn reap_closing(&mut self) {
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

/// `ucp_err_handler_cb_t` of every endpoint.
pub(super) unsafe extern "C" fn endpoint_failed(
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
pub(super) unsafe extern "C" fn conn_requested(req: sys::ucp_conn_request_h, arg: *mut c_void) {
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
