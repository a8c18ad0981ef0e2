//! A context's asynchronous events, typed: what `ibv_get_async_event` reports when a QP
//! or a port fails, a link comes back, or an SRQ runs low — the failures no completion
//! carries (a responder QP's access error, a port going down with nothing in flight).
//!
//! [`Context::next_async_event`] takes one (waiting as long as asked), acknowledges it
//! and returns it as an [`AsyncEvent`]; [`Context::async_fd`] is the descriptor an event
//! loop polls for readability. One consumer per context: two threads taking events of
//! one context race for them, as with libibverbs.

use core::fmt;
use std::os::fd::RawFd;
use std::time::Duration;

use super::context::Context;
use crate::error::{Error, Result};
use crate::sys;

/// What happened (`enum ibv_event_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum AsyncEventKind {
    /// A CQ overran (`IBV_EVENT_CQ_ERR`).
    CqErr,
    /// A QP hit a fatal error and is in the error state (`IBV_EVENT_QP_FATAL`).
    QpFatal,
    /// A responder QP received an invalid request and is in error (`IBV_EVENT_QP_REQ_ERR`).
    QpReqErr,
    /// A responder QP refused a remote access and is in error (`IBV_EVENT_QP_ACCESS_ERR`).
    QpAccessErr,
    /// First packet on a QP in RTR (`IBV_EVENT_COMM_EST`).
    CommEst,
    /// A QP in SQD has drained its send queue (`IBV_EVENT_SQ_DRAINED`).
    SqDrained,
    /// A QP migrated to its alternate path (`IBV_EVENT_PATH_MIG`).
    PathMig,
    /// Path migration failed (`IBV_EVENT_PATH_MIG_ERR`).
    PathMigErr,
    /// The device failed; every object of the context is unusable
    /// (`IBV_EVENT_DEVICE_FATAL`).
    DeviceFatal,
    /// A port's link came up (`IBV_EVENT_PORT_ACTIVE`).
    PortActive,
    /// A port's link went down (`IBV_EVENT_PORT_ERR`).
    PortErr,
    /// `IBV_EVENT_LID_CHANGE`.
    LidChange,
    /// `IBV_EVENT_PKEY_CHANGE`.
    PkeyChange,
    /// `IBV_EVENT_SM_CHANGE`.
    SmChange,
    /// An SRQ failed (`IBV_EVENT_SRQ_ERR`).
    SrqErr,
    /// An SRQ fell below its armed limit (`IBV_EVENT_SRQ_LIMIT_REACHED`).
    SrqLimitReached,
    /// A QP of an SRQ, in error, takes no more of its receives
    /// (`IBV_EVENT_QP_LAST_WQE_REACHED`).
    QpLastWqeReached,
    /// `IBV_EVENT_CLIENT_REREGISTER`.
    ClientReregister,
    /// `IBV_EVENT_GID_CHANGE`.
    GidChange,
    /// A work queue failed (`IBV_EVENT_WQ_FATAL`).
    WqFatal,
    /// A value this crate does not know.
    Other(u32),
}

impl AsyncEventKind {
    /// The kind of an `enum ibv_event_type` value.
    pub fn from_raw(v: u32) -> Self {
        use AsyncEventKind::*;
        const KINDS: [AsyncEventKind; 20] = [
            CqErr,
            QpFatal,
            QpReqErr,
            QpAccessErr,
            CommEst,
            SqDrained,
            PathMig,
            PathMigErr,
            DeviceFatal,
            PortActive,
            PortErr,
            LidChange,
            PkeyChange,
            SmChange,
            SrqErr,
            SrqLimitReached,
            QpLastWqeReached,
            ClientReregister,
            GidChange,
            WqFatal,
        ];
        KINDS.get(v as usize).copied().unwrap_or(Other(v))
    }

    /// Whether the event means its QP is in the error state (a fatal, request or access
    /// error): the QP's outstanding work completes flushed and it carries nothing more.
    pub fn fails_qp(self) -> bool {
        matches!(
            self,
            AsyncEventKind::QpFatal | AsyncEventKind::QpReqErr | AsyncEventKind::QpAccessErr
        )
    }

    fn subject(self, e: &sys::ibv_async_event) -> EventSubject {
        use AsyncEventKind::*;
        // SAFETY: every member of the union is plain data over the same bytes; reading
        // the address member copies the address, whichever member was written.
        let addr = unsafe { e.element.cq } as usize;
        match self {
            CqErr => EventSubject::Cq(addr),
            QpFatal | QpReqErr | QpAccessErr | CommEst | SqDrained | PathMig | PathMigErr
            | QpLastWqeReached => {
                // SAFETY: as above; a QP event's member is the QP.
                let qp = unsafe { e.element.qp };
                EventSubject::Qp {
                    // SAFETY: a QP event names a live QP of the context (its destruction
                    // waits for this event's acknowledgement), or null.
                    qp_num: unsafe { qp.as_ref() }.map_or(0, |q| q.qp_num),
                    handle: addr,
                }
            }
            SrqErr | SrqLimitReached => EventSubject::Srq(addr),
            WqFatal => EventSubject::Wq(addr),
            PortActive | PortErr | LidChange | PkeyChange | SmChange | ClientReregister
            | GidChange => {
                // SAFETY: as above; a port event's member is the port number.
                EventSubject::Port(unsafe { e.element.port_num } as u8)
            }
            DeviceFatal | Other(_) => EventSubject::Device,
        }
    }
}

/// What an event is about. Objects are named by address (compare with `as_raw()` of
/// the crate's wrappers); a QP also by number.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EventSubject {
    /// A QP: its number and its `ibv_qp` address.
    Qp {
        /// The QP number.
        qp_num: u32,
        /// The `ibv_qp` address.
        handle: usize,
    },
    /// A CQ, by its `ibv_cq` address.
    Cq(usize),
    /// An SRQ, by its `ibv_srq` address.
    Srq(usize),
    /// A work queue, by its `ibv_wq` address.
    Wq(usize),
    /// A port, by number.
    Port(u8),
    /// The whole device.
    Device,
}

/// One asynchronous event, already acknowledged.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AsyncEvent {
    /// What happened.
    pub kind: AsyncEventKind,
    /// To what.
    pub subject: EventSubject,
}

impl fmt::Display for AsyncEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.kind)?;
        match self.subject {
            EventSubject::Qp { qp_num, .. } => write!(f, " on QP {qp_num:#x}"),
            EventSubject::Cq(a) => write!(f, " on CQ {a:#x}"),
            EventSubject::Srq(a) => write!(f, " on SRQ {a:#x}"),
            EventSubject::Wq(a) => write!(f, " on WQ {a:#x}"),
            EventSubject::Port(p) => write!(f, " on port {p}"),
            EventSubject::Device => write!(f, " on the device"),
        }
    }
}

impl Context {
    /// The context's asynchronous event descriptor: readable (`poll(2)`) while an event
    /// waits. Valid while the context lives.
    pub fn async_fd(&self) -> RawFd {
        // SAFETY: a live context; `async_fd` is set at open and never changes.
        unsafe { (*self.as_raw()).async_fd }
    }

    /// The next asynchronous event, waiting at most `timeout` (`None`: until one comes;
    /// zero: not at all); `Ok(None)` when none came in time. The event is acknowledged
    /// before it is returned.
    ///
    /// # Errors
    /// [`Error::Verbs`] when polling the descriptor or `ibv_get_async_event` fails.
    pub fn next_async_event(&self, timeout: Option<Duration>) -> Result<Option<AsyncEvent>> {
        if let Some(t) = timeout {
            let mut pfd = libc::pollfd {
                fd: self.async_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            let ms = t.as_millis().min(i32::MAX as u128) as i32;
            loop {
                // SAFETY: one valid pollfd.
                let n = unsafe { libc::poll(&mut pfd, 1, ms) };
                if n > 0 {
                    break;
                }
                if n == 0 {
                    return Ok(None);
                }
                let e = std::io::Error::last_os_error();
                if e.raw_os_error() != Some(libc::EINTR) {
                    return Err(Error::Verbs {
                        function: "poll(async_fd)",
                        source: e,
                    });
                }
            }
        }
        let table = self.verbs().table();
        let mut ev = sys::ibv_async_event::default();
        // SAFETY: a live context; `ev` is writable.
        if unsafe { (table.get_async_event)(self.as_raw(), &mut ev) } != 0 {
            return Err(Error::verbs_errno("ibv_get_async_event"));
        }
        let kind = AsyncEventKind::from_raw(ev.event_type);
        let subject = kind.subject(&ev);
        // SAFETY: `ev` came from `ibv_get_async_event` and is acknowledged once.
        unsafe { (table.ack_async_event)(&mut ev) };
        Ok(Some(AsyncEvent { kind, subject }))
    }

    /// Every asynchronous event waiting now, without waiting for more.
    ///
    /// # Errors
    /// As [`Context::next_async_event`].
    pub fn pending_async_events(&self) -> Result<Vec<AsyncEvent>> {
        let mut out = Vec::new();
        while let Some(e) = self.next_async_event(Some(Duration::ZERO))? {
            out.push(e);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_follow_the_enum_and_unknown_values_are_kept() {
        for v in 0..20 {
            assert!(!matches!(
                AsyncEventKind::from_raw(v),
                AsyncEventKind::Other(_)
            ));
        }
        assert_eq!(AsyncEventKind::from_raw(1), AsyncEventKind::QpFatal);
        assert_eq!(AsyncEventKind::from_raw(10), AsyncEventKind::PortErr);
        assert_eq!(
            AsyncEventKind::from_raw(16),
            AsyncEventKind::QpLastWqeReached
        );
        assert_eq!(AsyncEventKind::from_raw(99), AsyncEventKind::Other(99));
        assert!(AsyncEventKind::QpAccessErr.fails_qp());
        assert!(!AsyncEventKind::QpLastWqeReached.fails_qp());
    }

    #[test]
    fn subjects_come_from_the_union_member_of_the_kind() {
        let mut qp = sys::ibv_qp {
            qp_num: 0x42,
            ..Default::default()
        };
        let mut e = sys::ibv_async_event {
            event_type: sys::IBV_EVENT_QP_FATAL,
            ..Default::default()
        };
        e.element.qp = &mut qp;
        let k = AsyncEventKind::from_raw(e.event_type);
        assert_eq!(
            k.subject(&e),
            EventSubject::Qp {
                qp_num: 0x42,
                handle: &mut qp as *mut _ as usize
            }
        );
        e.event_type = sys::IBV_EVENT_PORT_ERR;
        e.element.port_num = 1;
        let ev = AsyncEvent {
            kind: AsyncEventKind::from_raw(e.event_type),
            subject: AsyncEventKind::PortErr.subject(&e),
        };
        assert_eq!(ev.subject, EventSubject::Port(1));
        assert_eq!(ev.to_string(), "PortErr on port 1");
    }
}
