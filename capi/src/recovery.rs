//! Failures and recovery on a connected endpoint: asynchronous events (read from a
//! device, applied to the endpoint that owns the QP), the failover counters and
//! clock, and fail-back — replacing a failed data QP through 8-byte messages the
//! application carries to the peer on a channel of its own.

use std::time::Duration;

use vqp_host::failback::{FailBack, MESSAGE_LEN, NOTIFY_QP};
use vqp_host::poller::PathFailure;
use vqp_host::{AsyncEvent, AsyncEventKind, EventSubject};

use crate::device::DEVICES;
use crate::endpoint::live;
use crate::status::{guard, vqp_status, Fail};
use crate::types::{vqp_device, vqp_endpoint};

/// `vqp_async_event.subject`: the event names a QP (`qp_num`).
pub const VQP_EVENT_SUBJECT_QP: u32 = 0;
/// `vqp_async_event.subject`: the event names a port (`port`).
pub const VQP_EVENT_SUBJECT_PORT: u32 = 1;
/// `vqp_async_event.subject`: the event names the device.
pub const VQP_EVENT_SUBJECT_DEVICE: u32 = 2;
/// `vqp_async_event.subject`: a CQ, SRQ or work queue.
pub const VQP_EVENT_SUBJECT_OTHER: u32 = 3;

/// `vqp_endpoint_offer_rejoin`'s `qp` for the SPRAY notify QP.
pub const VQP_NOTIFY_QP: u32 = NOTIFY_QP as u32;
/// The length of a fail-back message.
pub const VQP_FAILBACK_LEN: u32 = 8;

const _: () = assert!(VQP_FAILBACK_LEN as usize == MESSAGE_LEN);

/// An asynchronous event of a device.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct vqp_async_event {
    /// libibverbs' `enum ibv_event_type` value (e.g. 1 `IBV_EVENT_QP_FATAL`, 10
    /// `IBV_EVENT_PORT_ERR`, 8 `IBV_EVENT_DEVICE_FATAL`).
    pub kind: u32,
    /// One of `VQP_EVENT_SUBJECT_*`.
    pub subject: u32,
    /// The QP's number (subject QP).
    pub qp_num: u32,
    /// The port (subject port).
    pub port: u32,
}

/// The failover counters of a connected endpoint.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct vqp_failover {
    /// Fragments posted again on another data QP.
    pub redispatched: u64,
    /// QPs that failed while the virtual QP went on.
    pub failovers: u32,
    /// Failed QPs replaced.
    pub restored: u32,
    /// Data QPs healthy now.
    pub healthy: u32,
    /// The virtual QP's failure status (libibverbs' `ibv_wc_status`), 0 while it runs.
    pub failed_status: u32,
    /// Requests in flight: sends, then receives.
    pub sends_in_flight: u32,
    /// Receives in flight.
    pub recvs_in_flight: u32,
}

fn raw_kind(kind: AsyncEventKind) -> u32 {
    match kind {
        AsyncEventKind::Other(v) => v,
        k => (0..32)
            .find(|&v| AsyncEventKind::from_raw(v) == k)
            .unwrap_or(u32::MAX),
    }
}

pub(crate) fn event_to_c(e: &AsyncEvent) -> vqp_async_event {
    let (subject, qp_num, port) = match e.subject {
        EventSubject::Qp { qp_num, .. } => (VQP_EVENT_SUBJECT_QP, qp_num, 0),
        EventSubject::Port(p) => (VQP_EVENT_SUBJECT_PORT, 0, u32::from(p)),
        EventSubject::Device => (VQP_EVENT_SUBJECT_DEVICE, 0, 0),
        _ => (VQP_EVENT_SUBJECT_OTHER, 0, 0),
    };
    vqp_async_event {
        kind: raw_kind(e.kind),
        subject,
        qp_num,
        port,
    }
}

fn from_c(e: &vqp_async_event) -> Result<AsyncEvent, Fail> {
    let subject = match e.subject {
        VQP_EVENT_SUBJECT_QP => EventSubject::Qp {
            qp_num: e.qp_num,
            handle: 0,
        },
        VQP_EVENT_SUBJECT_PORT => {
            EventSubject::Port(u8::try_from(e.port).map_err(|_| Fail::invalid("port above 255"))?)
        }
        VQP_EVENT_SUBJECT_DEVICE => EventSubject::Device,
        VQP_EVENT_SUBJECT_OTHER => EventSubject::Cq(0),
        _ => return Err(Fail::invalid("subject is not one of VQP_EVENT_SUBJECT_*")),
    };
    Ok(AsyncEvent {
        kind: AsyncEventKind::from_raw(e.kind),
        subject,
    })
}

/// The device's asynchronous event descriptor, to wait on with `poll(2)` (readable
/// when an event waits); read the event with `vqp_device_next_event`.
///
/// Errors: `VQP_ERR_NULL`, `VQP_ERR_STALE_HANDLE`.
///
/// Thread-safety: any thread, concurrently with other calls on the device.
///
/// # Safety
/// `fd` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn vqp_device_async_fd(dev: vqp_device, fd: *mut i32) -> vqp_status {
    guard(|| {
        if fd.is_null() || dev.handle == 0 {
            return Err(Fail::null("fd or the device handle is null"));
        }
        let d = DEVICES.get(dev.handle)?;
        // SAFETY: live handle, read only, not destroyed during the call.
        let raw = unsafe { &*d }.ctx.async_fd();
        // SAFETY: `fd` is non-null and writable.
        unsafe { fd.write(raw) };
        Ok(())
    })
}

/// Takes the device's next asynchronous event (acknowledged here), waiting up to
/// `timeout_ms` (0: not at all). `*got` is 1 when `*out` holds one, else 0.
///
/// Errors: `VQP_ERR_NULL`, `VQP_ERR_STALE_HANDLE`, `VQP_ERR_VERBS`.
///
/// Thread-safety: one thread at a time per device for this call; concurrently with
/// the device's other calls.
///
/// # Safety
/// `out` and `got` are null or writable.
#[no_mangle]
pub unsafe extern "C" fn vqp_device_next_event(
    dev: vqp_device,
    timeout_ms: u32,
    out: *mut vqp_async_event,
    got: *mut i32,
) -> vqp_status {
    guard(|| {
        if out.is_null() || got.is_null() || dev.handle == 0 {
            return Err(Fail::null("out, got or the device handle is null"));
        }
        let d = DEVICES.get(dev.handle)?;
        // SAFETY: live handle, not destroyed during the call.
        let ctx = &unsafe { &*d }.ctx;
        let ev = ctx.next_async_event(Some(Duration::from_millis(u64::from(timeout_ms))))?;
        // SAFETY: `got` and `out` are non-null and writable.
        unsafe {
            got.write(i32::from(ev.is_some()));
            if let Some(e) = ev {
                out.write(event_to_c(&e));
            }
        }
        Ok(())
    })
}

/// Applies an asynchronous event of the endpoint's device `device` (its index in
/// `vqp_endpoint_create`'s array) to the endpoint: a QP fatal, request or access
/// error on one of its QPs fails that QP, a port error or device fatal fails every
/// QP on the device — as their error completions would, before any comes (with
/// re-dispatch, the rest go on). `*failed` is 1 when it failed something here.
/// Events about nothing of this endpoint change nothing.
///
/// Errors: `VQP_ERR_NULL`, `VQP_ERR_STALE_HANDLE`, `VQP_ERR_STATE` (not connected),
/// `VQP_ERR_INVALID_ARGUMENT`.
///
/// Thread-safety: as `vqp_post_send` (it changes the endpoint's state).
///
/// # Safety
/// `ev` is null or readable; `failed` null or writable.
#[no_mangle]
pub unsafe extern "C" fn vqp_endpoint_apply_event(
    ep: vqp_endpoint,
    device: u32,
    ev: *const vqp_async_event,
    failed: *mut i32,
) -> vqp_status {
    guard(|| {
        if ev.is_null() || failed.is_null() {
            return Err(Fail::null("ev or failed is null"));
        }
        let device = u8::try_from(device)
            .ok()
            .filter(|&d| usize::from(d) < vqp_core::MAX_DEVICES)
            .ok_or(Fail::invalid("device index above VQP_MAX_DEVICES"))?;
        // SAFETY: `ev` is readable.
        let event = from_c(unsafe { &*ev })?;
        // SAFETY: one thread at a time per endpoint (the contract).
        let l = unsafe { live(ep) }?;
        let hit = match PathFailure::from_event(device, event) {
            Some(f) => match f.qp_num {
                Some(q) => l.conn.vqp.fail_qp(q, device, f.status()),
                None => l.conn.vqp.fail_device(device, f.status()),
            },
            None => false,
        };
        // SAFETY: `failed` is non-null and writable.
        unsafe { failed.write(i32::from(hit)) };
        Ok(())
    })
}

/// The endpoint's failover counters and whether it failed.
///
/// Errors: `VQP_ERR_NULL`, `VQP_ERR_STALE_HANDLE`, `VQP_ERR_STATE`.
///
/// Thread-safety: as `vqp_post_send`.
///
/// # Safety
/// `out` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn vqp_endpoint_failover(
    ep: vqp_endpoint,
    out: *mut vqp_failover,
) -> vqp_status {
    guard(|| {
        if out.is_null() {
            return Err(Fail::null("out is null"));
        }
        // SAFETY: one thread at a time per endpoint (the contract).
        let l = unsafe { live(ep) }?;
        let v = &l.conn.vqp;
        let f = v.failover();
        let s = vqp_failover {
            redispatched: f.redispatched,
            failovers: f.failovers,
            restored: f.restored,
            healthy: f.healthy,
            failed_status: v.failure().map_or(0, |s| s.0),
            sends_in_flight: v.sends_in_flight() as u32,
            recvs_in_flight: v.recvs_in_flight() as u32,
        };
        // SAFETY: `out` is non-null and writable.
        unsafe { out.write(s) };
        Ok(())
    })
}

/// Tells the endpoint the time (`now_ns`, any monotonic clock in nanoseconds, the
/// same every call): the adaptive policy folds in what it measured, and with
/// re-dispatch the grace period of a virtual QP with no path left runs on it.
/// `*expired` is 1 once that grace period is over (the virtual QP then failed).
///
/// Errors: `VQP_ERR_NULL`, `VQP_ERR_STALE_HANDLE`, `VQP_ERR_STATE`.
///
/// Thread-safety: as `vqp_post_send`.
///
/// # Safety
/// `expired` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn vqp_endpoint_sample(
    ep: vqp_endpoint,
    now_ns: u64,
    expired: *mut i32,
) -> vqp_status {
    guard(|| {
        if expired.is_null() {
            return Err(Fail::null("expired is null"));
        }
        // SAFETY: one thread at a time per endpoint (the contract).
        let l = unsafe { live(ep) }?;
        l.conn.vqp.sample(now_ns);
        // SAFETY: `expired` is non-null and writable.
        unsafe { expired.write(i32::from(l.conn.vqp.grace_expired())) };
        Ok(())
    })
}

/// Starts fail-back of data QP `qp` (or `VQP_NOTIFY_QP`): once its old QP drained, a
/// fresh one takes its place, and the Offer to carry to the peer (over the
/// application's own channel, not the data QPs) is written to `msg`. The peer hands
/// it to its `vqp_endpoint_on_failback`, and the answers go back and forth the same
/// way. Both sides need `redispatch`; the peer must speak fail-back.
///
/// Errors: `VQP_ERR_NULL`, `VQP_ERR_STALE_HANDLE`, `VQP_ERR_STATE`, `VQP_ERR_PEER`
/// (the peer lacks fail-back, no such QP), `VQP_ERR_CONFIG` (vqp-core refuses now,
/// e.g. the old QP's receives still flush: poll and offer again), `VQP_ERR_VERBS`.
///
/// Thread-safety: as `vqp_post_send`.
///
/// # Safety
/// `msg` is null or writable for `VQP_FAILBACK_LEN` bytes.
#[no_mangle]
pub unsafe extern "C" fn vqp_endpoint_offer_rejoin(
    ep: vqp_endpoint,
    qp: u32,
    msg: *mut u8,
) -> vqp_status {
    guard(|| {
        if msg.is_null() {
            return Err(Fail::null("msg is null"));
        }
        // SAFETY: one thread at a time per endpoint (the contract).
        let l = unsafe { live(ep) }?;
        let m = l.conn.offer_rejoin(qp as usize)?;
        let bytes = m.encode();
        // SAFETY: `msg` has VQP_FAILBACK_LEN writable bytes.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), msg, MESSAGE_LEN) };
        Ok(())
    })
}

/// Takes a fail-back message from the peer; when it calls for an answer, writes it to
/// `reply` and sets `*has_reply` to 1 (send it to the peer), else 0.
///
/// Errors: `VQP_ERR_NULL`, `VQP_ERR_STALE_HANDLE`, `VQP_ERR_STATE`, `VQP_ERR_PEER`
/// (a malformed message, or one that does not follow: nothing changed),
/// `VQP_ERR_VERBS`.
///
/// Thread-safety: as `vqp_post_send`.
///
/// # Safety
/// `msg` is null or readable for `VQP_FAILBACK_LEN` bytes; `reply` null or writable
/// for as many; `has_reply` null or writable.
#[no_mangle]
pub unsafe extern "C" fn vqp_endpoint_on_failback(
    ep: vqp_endpoint,
    msg: *const u8,
    reply: *mut u8,
    has_reply: *mut i32,
) -> vqp_status {
    guard(|| {
        if msg.is_null() || reply.is_null() || has_reply.is_null() {
            return Err(Fail::null("msg, reply or has_reply is null"));
        }
        let mut b = [0u8; MESSAGE_LEN];
        // SAFETY: `msg` has VQP_FAILBACK_LEN readable bytes.
        unsafe { std::ptr::copy_nonoverlapping(msg, b.as_mut_ptr(), MESSAGE_LEN) };
        let m = FailBack::decode(&b).map_err(vqp_host::Error::from)?;
        // SAFETY: one thread at a time per endpoint (the contract).
        let l = unsafe { live(ep) }?;
        let answer = l.conn.on_failback(m)?;
        // SAFETY: `reply` has VQP_FAILBACK_LEN writable bytes; `has_reply` writable.
        unsafe {
            if let Some(a) = answer {
                std::ptr::copy_nonoverlapping(a.encode().as_ptr(), reply, MESSAGE_LEN);
            }
            has_reply.write(i32::from(answer.is_some()));
        }
        Ok(())
    })
}
