//! `struct ibv_async_event` and `enum ibv_event_type`.

use core::ffi::{c_int, c_void};

use super::{ibv_cq, ibv_qp, ibv_srq};

/// `union { ibv_cq *cq; ibv_qp *qp; ibv_srq *srq; ibv_wq *wq; int port_num; }` of
/// [`ibv_async_event`].
#[repr(C)]
#[derive(Clone, Copy)]
pub union ibv_async_event_element {
    /// The CQ of a CQ event.
    pub cq: *mut ibv_cq,
    /// The QP of a QP event.
    pub qp: *mut ibv_qp,
    /// The SRQ of an SRQ event.
    pub srq: *mut ibv_srq,
    /// The WQ of a WQ event.
    pub wq: *mut c_void,
    /// The port of a port event.
    pub port_num: c_int,
}

/// `struct ibv_async_event`, filled by `ibv_get_async_event`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_async_event {
    /// The object the event is about.
    pub element: ibv_async_event_element,
    /// `enum ibv_event_type` (`IBV_EVENT_*`).
    pub event_type: u32,
}

impl Default for ibv_async_event {
    fn default() -> Self {
        ibv_async_event {
            element: ibv_async_event_element {
                cq: core::ptr::null_mut(),
            },
            event_type: 0,
        }
    }
}

impl core::fmt::Debug for ibv_async_event {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        // SAFETY: every member is plain data over the same bytes; reading the pointer
        // member only copies the address.
        let element = unsafe { self.element.cq };
        f.debug_struct("ibv_async_event")
            .field("element", &element)
            .field("event_type", &self.event_type)
            .finish()
    }
}

/// `IBV_EVENT_CQ_ERR`: a CQ overran.
pub const IBV_EVENT_CQ_ERR: u32 = 0;
/// `IBV_EVENT_QP_FATAL`: a QP hit a fatal error.
pub const IBV_EVENT_QP_FATAL: u32 = 1;
/// `IBV_EVENT_QP_REQ_ERR`: a QP (responder) received an invalid request.
pub const IBV_EVENT_QP_REQ_ERR: u32 = 2;
/// `IBV_EVENT_QP_ACCESS_ERR`: a QP (responder) refused a remote access.
pub const IBV_EVENT_QP_ACCESS_ERR: u32 = 3;
/// `IBV_EVENT_COMM_EST`: first packet on a QP in RTR.
pub const IBV_EVENT_COMM_EST: u32 = 4;
/// `IBV_EVENT_SQ_DRAINED`: a QP in SQD has no outstanding send.
pub const IBV_EVENT_SQ_DRAINED: u32 = 5;
/// `IBV_EVENT_PATH_MIG`: a QP migrated to its alternate path.
pub const IBV_EVENT_PATH_MIG: u32 = 6;
/// `IBV_EVENT_PATH_MIG_ERR`: path migration failed.
pub const IBV_EVENT_PATH_MIG_ERR: u32 = 7;
/// `IBV_EVENT_DEVICE_FATAL`: the device failed.
pub const IBV_EVENT_DEVICE_FATAL: u32 = 8;
/// `IBV_EVENT_PORT_ACTIVE`: a port's link came up.
pub const IBV_EVENT_PORT_ACTIVE: u32 = 9;
/// `IBV_EVENT_PORT_ERR`: a port's link went down.
pub const IBV_EVENT_PORT_ERR: u32 = 10;
/// `IBV_EVENT_LID_CHANGE`.
pub const IBV_EVENT_LID_CHANGE: u32 = 11;
/// `IBV_EVENT_PKEY_CHANGE`.
pub const IBV_EVENT_PKEY_CHANGE: u32 = 12;
/// `IBV_EVENT_SM_CHANGE`.
pub const IBV_EVENT_SM_CHANGE: u32 = 13;
/// `IBV_EVENT_SRQ_ERR`: an SRQ failed.
pub const IBV_EVENT_SRQ_ERR: u32 = 14;
/// `IBV_EVENT_SRQ_LIMIT_REACHED`: an SRQ fell below its armed limit.
pub const IBV_EVENT_SRQ_LIMIT_REACHED: u32 = 15;
/// `IBV_EVENT_QP_LAST_WQE_REACHED`: a QP of an SRQ in error takes no more receives.
pub const IBV_EVENT_QP_LAST_WQE_REACHED: u32 = 16;
/// `IBV_EVENT_CLIENT_REREGISTER`.
pub const IBV_EVENT_CLIENT_REREGISTER: u32 = 17;
/// `IBV_EVENT_GID_CHANGE`.
pub const IBV_EVENT_GID_CHANGE: u32 = 18;
/// `IBV_EVENT_WQ_FATAL`.
pub const IBV_EVENT_WQ_FATAL: u32 = 19;
