//! The poll-thread mode: a connected endpoint handed to a poll thread (pinned or not,
//! spinning, yielding or blocking when idle), and an application handle whose submit
//! and completion calls are the hand-off rings — single producer, single consumer, no
//! lock, no allocation, no system call while the poll thread spins.

use std::time::Duration;

use vqp_core::PostSendError;
use vqp_host::poller::EventWatch;
use vqp_host::{Connected, Event, Handle, Idle, PollThread, PollerConfig, Refusal, Stack, Stats};

use crate::data::send_wr;
use crate::endpoint::{object, Link, State};
use crate::recovery::vqp_async_event;
use crate::status::{guard, vqp_status, Fail, VQP_ERR_FULL, VQP_ERR_STATE, VQP_ERR_STRUCT_SIZE};
use crate::table::Table;
use crate::types::{vqp_endpoint, vqp_recv_wr, vqp_send_wr, vqp_wc, VQP_WC_WITH_IMM};

/// Requests (and events) the hand-off rings hold each way.
pub const VQP_APP_RING: u32 = 1024;
const RING: usize = VQP_APP_RING as usize;

/// `vqp_poller_config.idle`: poll again at once (lowest latency, a core used fully).
pub const VQP_IDLE_SPIN: u32 = 0;
/// `vqp_poller_config.idle`: after `spins` idle rounds, yield between rounds.
pub const VQP_IDLE_YIELD: u32 = 1;
/// `vqp_poller_config.idle`: after `spins` idle rounds, sleep up to `timeout_ms`
/// (a submission wakes it).
pub const VQP_IDLE_BLOCK: u32 = 2;

/// `vqp_event.kind`: a request completed (see `wc.status`).
pub const VQP_EVENT_COMPLETED: u32 = 0;
/// `vqp_event.kind`: the virtual QP refused a request (`wc.wr_id`; why in
/// `refusal`); nothing of it was posted.
pub const VQP_EVENT_REJECTED: u32 = 1;
/// `vqp_event.kind`: an asynchronous event (`path`) failed the virtual QP; its
/// outstanding requests follow, each completed once with an error.
pub const VQP_EVENT_PATH_FAILED: u32 = 2;

/// How a poll thread runs. Fill with `vqp_poller_config_init`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct vqp_poller_config {
    /// `sizeof(vqp_poller_config)`.
    pub struct_size: u32,
    /// The core to pin the thread to, or -1 (default) to leave it to the scheduler.
    pub core: i32,
    /// One of `VQP_IDLE_*` (default spin).
    pub idle: u32,
    /// Idle rounds before yielding or sleeping (default 1000).
    pub spins: u32,
    /// The longest sleep under `VQP_IDLE_BLOCK`, in milliseconds (default 1).
    pub timeout_ms: u32,
    /// Requests taken per round at most (default 32).
    pub batch: u32,
    /// 1 (default): watch the devices' asynchronous events and fail the virtual QP
    /// on a QP, port or device failure (`VQP_EVENT_PATH_FAILED`).
    pub watch_events: u32,
}

/// What the poll thread reports to the application.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct vqp_event {
    /// One of `VQP_EVENT_*`.
    pub kind: u32,
    /// For `VQP_EVENT_REJECTED`: the `vqp_status` that `vqp_post_send` or
    /// `vqp_post_recv` would have returned.
    pub refusal: i32,
    /// The completion (`VQP_EVENT_COMPLETED`), or the refused request's `wr_id`.
    pub wc: vqp_wc,
    /// The asynchronous event (`VQP_EVENT_PATH_FAILED`).
    pub path: vqp_async_event,
}

/// What a poll thread did, returned when it stops.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct vqp_poller_stats {
    /// Requests the virtual QP took.
    pub submitted: u64,
    /// Completions delivered or left undelivered.
    pub completed: u64,
    /// Requests refused.
    pub rejected: u64,
    /// Times a request met backpressure and waited.
    pub backpressure: u64,
    /// Rounds of the loop.
    pub rounds: u64,
    /// Times the thread slept.
    pub sleeps: u64,
    /// Requests still in flight when it stopped.
    pub outstanding: u64,
    /// Events it could not deliver before its deadline.
    pub undelivered: u64,
    /// 1 when it stopped by aborting.
    pub aborted: u32,
    /// 1 when it stopped at its deadline with work left.
    pub timed_out: u32,
}

/// The application's side of a poll thread.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct vqp_app {
    /// Opaque; 0 is none.
    pub handle: u64,
}

/// A poll thread and the handle to it.
struct App {
    handle: Handle<RING>,
    thread: Option<PollThread<RING>>,
    scratch: [Event; 32],
    /// How the endpoint was set up (dropped after the thread, with its QPs, is gone).
    _link: Link,
}

static APPS: Table<App> = Table::new(4);

/// Fills `c` with the defaults (unpinned, spinning, 32 per round, events watched).
///
/// Errors: `VQP_ERR_NULL`, `VQP_ERR_STRUCT_SIZE`.
///
/// Thread-safety: any thread.
///
/// # Safety
/// `c` is null or writable for `size` bytes.
#[no_mangle]
pub unsafe extern "C" fn vqp_poller_config_init(
    c: *mut vqp_poller_config,
    size: usize,
) -> vqp_status {
    guard(|| {
        if c.is_null() {
            return Err(Fail::null("config pointer is null"));
        }
        if size != std::mem::size_of::<vqp_poller_config>() {
            return Err(Fail::new(
                VQP_ERR_STRUCT_SIZE,
                "size is not sizeof(vqp_poller_config)",
            ));
        }
        let v = vqp_poller_config {
            struct_size: size as u32,
            core: -1,
            idle: VQP_IDLE_SPIN,
            spins: 1000,
            timeout_ms: 1,
            batch: 32,
            watch_events: 1,
        };
        // SAFETY: `c` is non-null and writable for `size` == sizeof bytes.
        unsafe { c.write(v) };
        Ok(())
    })
}

/// Hands the connected endpoint `ep` to a new poll thread and returns the
/// application's handle to it in `*out`. From then on `ep` takes no data-path call
/// (`VQP_ERR_STATE`); destroy it whenever. Stop the thread with `vqp_app_stop`.
///
/// Errors: `VQP_ERR_NULL`, `VQP_ERR_STALE_HANDLE`, `VQP_ERR_STRUCT_SIZE`,
/// `VQP_ERR_STATE` (not connected), `VQP_ERR_INVALID_ARGUMENT`, `VQP_ERR_PEER`…
/// (the thread could not start or be pinned: the endpoint is spent).
///
/// Thread-safety: not concurrently with other calls on `ep`.
///
/// # Safety
/// `config` is null or a readable `vqp_poller_config`; `out` null or writable.
#[no_mangle]
pub unsafe extern "C" fn vqp_endpoint_start_poller(
    ep: vqp_endpoint,
    config: *const vqp_poller_config,
    out: *mut vqp_app,
) -> vqp_status {
    guard(|| {
        if config.is_null() || out.is_null() {
            return Err(Fail::null("config or out is null"));
        }
        // SAFETY: readable (the contract); its first field is checked next.
        let c = unsafe { *config };
        if c.struct_size as usize != std::mem::size_of::<vqp_poller_config>() {
            return Err(Fail::new(
                VQP_ERR_STRUCT_SIZE,
                "struct_size is not sizeof(vqp_poller_config)",
            ));
        }
        let timeout = Duration::from_millis(u64::from(c.timeout_ms.max(1)));
        let idle = match c.idle {
            VQP_IDLE_SPIN => Idle::Spin,
            VQP_IDLE_YIELD => Idle::SpinThenYield { spins: c.spins },
            VQP_IDLE_BLOCK => Idle::Block {
                spins: c.spins,
                timeout,
            },
            _ => return Err(Fail::invalid("idle is not one of VQP_IDLE_*")),
        };
        if c.batch == 0 {
            return Err(Fail::invalid("batch must be at least 1"));
        }
        let core = match c.core {
            -1 => None,
            n => {
                Some(usize::try_from(n).map_err(|_| Fail::invalid("core is not -1 or a core id"))?)
            }
        };
        // SAFETY: not concurrently with other calls on `ep` (the contract).
        let obj = unsafe { object(ep) }?;
        if !matches!(obj.state, State::Connected(_)) {
            return Err(Fail::new(VQP_ERR_STATE, "the endpoint is not connected"));
        }
        let watch = if c.watch_events != 0 {
            Some(EventWatch::spawn(obj.contexts.clone())?)
        } else {
            None
        };
        let State::Connected(mut live) = std::mem::replace(&mut obj.state, State::Spent) else {
            // Checked above; nothing between could change it.
            return Err(Fail::new(VQP_ERR_STATE, "the endpoint is not connected"));
        };
        // The set-up's connection (TCP, or the QPs' CM connections) stays with the app
        // handle as long as the QPs it announced live.
        let link = std::mem::replace(&mut live.link, Link::Cards);
        // The virtual QP is large: it stays behind the box until the factory, on the
        // poll thread, moves it into the stack (as examples/lat does).
        let factory = move || {
            let Connected { vqp, vcq, .. } = live.conn;
            let stack = Stack::new(vcq, vec![vqp]);
            Ok(match watch {
                Some(w) => stack.with_events(w),
                None => stack,
            })
        };
        let cfg = PollerConfig {
            core,
            idle,
            batch: c.batch as usize,
            name: "vqp-poll".into(),
        };
        let (thread, mut handles) = PollThread::<RING>::spawn(cfg, 1, factory)?;
        let Some(handle) = handles.pop() else {
            return Err(Fail::new(VQP_ERR_STATE, "the poll thread gave no handle"));
        };
        let app = APPS.insert(App {
            handle,
            thread: Some(thread),
            scratch: [Event::Completed(vqp_core::Wc::EMPTY); 32],
            _link: link,
        })?;
        // SAFETY: `out` is non-null and writable.
        unsafe { out.write(vqp_app { handle: app }) };
        Ok(())
    })
}

/// The application handle, for a data-path call.
///
/// # Safety
/// One thread at a time per app handle (the header's contract).
unsafe fn app<'a>(a: vqp_app) -> Result<&'a mut App, Fail> {
    if a.handle == 0 {
        return Err(Fail::null("app handle is null"));
    }
    let p = APPS.get(a.handle)?;
    // SAFETY: live handle; exclusive by the contract.
    Ok(unsafe { &mut *p })
}

/// Submits a send request to the poll thread (which posts it with `vqp_post_send`'s
/// checks; a refusal comes back as a `VQP_EVENT_REJECTED` event).
///
/// Errors: `VQP_ERR_NULL`, `VQP_ERR_STALE_HANDLE`, `VQP_ERR_INVALID_ARGUMENT`,
/// `VQP_ERR_FULL` (the ring is full: take events, retry; nothing was handed over).
///
/// Thread-safety: one thread at a time per app handle, any thread (the poll thread
/// is the other side of the ring). No lock, no allocation; a system call only to
/// wake a poll thread that sleeps (`VQP_IDLE_BLOCK`).
///
/// # Safety
/// `wr` is null or readable.
#[no_mangle]
pub unsafe extern "C" fn vqp_app_send(a: vqp_app, wr: *const vqp_send_wr) -> vqp_status {
    guard(|| {
        if wr.is_null() {
            return Err(Fail::null("wr is null"));
        }
        // SAFETY: readable (the contract).
        let w = send_wr(unsafe { &*wr })?;
        // SAFETY: one thread at a time per app handle (the contract).
        let h = unsafe { app(a) }?;
        h.handle
            .send(*w)
            .map_err(|_| Fail::from(PostSendError::Full))
    })
}

/// Submits a receive request to the poll thread.
///
/// Errors: as `vqp_app_send`.
///
/// Thread-safety: as `vqp_app_send`.
///
/// # Safety
/// `wr` is null or readable.
#[no_mangle]
pub unsafe extern "C" fn vqp_app_recv(a: vqp_app, wr: *const vqp_recv_wr) -> vqp_status {
    guard(|| {
        if wr.is_null() {
            return Err(Fail::null("wr is null"));
        }
        // SAFETY: readable (the contract).
        let w = unsafe { &*wr };
        let r = vqp_core::RecvWr::data(w.wr_id, w.addr, w.len, w.lkey);
        // SAFETY: one thread at a time per app handle (the contract).
        let h = unsafe { app(a) }?;
        h.handle
            .recv(r)
            .map_err(|_| Fail::new(VQP_ERR_FULL, "the request ring is full: take events, retry"))
    })
}

fn wc_of(w: &vqp_core::Wc) -> vqp_wc {
    vqp_wc {
        wr_id: w.wr_id,
        byte_len: w.byte_len,
        status: w.status.0,
        opcode: w.opcode.0,
        qp_num: w.qp_num,
        imm_data: w.imm_data.unwrap_or(0),
        flags: if w.imm_data.is_some() {
            VQP_WC_WITH_IMM
        } else {
            0
        },
        reserved: 0,
    }
}

/// Takes up to `cap` events (at most 32 a call) from the poll thread into `out`,
/// their number into `*n`.
///
/// Errors: `VQP_ERR_NULL`, `VQP_ERR_STALE_HANDLE`.
///
/// Thread-safety: as `vqp_app_send`.
///
/// # Safety
/// `out` is writable for `cap` events (or null with `cap` 0); `n` writable.
#[no_mangle]
pub unsafe extern "C" fn vqp_app_poll(
    a: vqp_app,
    out: *mut vqp_event,
    cap: u32,
    n: *mut u32,
) -> vqp_status {
    guard(|| {
        if n.is_null() || (out.is_null() && cap > 0) {
            return Err(Fail::null("n is null, or out is null with cap > 0"));
        }
        // SAFETY: one thread at a time per app handle (the contract).
        let h = unsafe { app(a) }?;
        let room = (cap as usize).min(h.scratch.len());
        let got = h.handle.poll_many(&mut h.scratch[..room]);
        for (i, e) in h.scratch[..got].iter().enumerate() {
            let mut ev = vqp_event::default();
            match e {
                Event::Completed(w) => {
                    ev.kind = VQP_EVENT_COMPLETED;
                    ev.wc = wc_of(w);
                }
                Event::Rejected { wr_id, error } => {
                    ev.kind = VQP_EVENT_REJECTED;
                    ev.wc.wr_id = *wr_id;
                    ev.refusal = match *error {
                        Refusal::Send(e) => Fail::from(e).code,
                        Refusal::Recv(e) => Fail::from(e).code,
                    } as i32;
                }
                Event::PathFailed(p) => {
                    ev.kind = VQP_EVENT_PATH_FAILED;
                    ev.path = crate::recovery::event_to_c(p);
                }
            }
            // SAFETY: i < got <= room <= cap; `out` is writable for `cap` events.
            unsafe { out.add(i).write(ev) };
        }
        // SAFETY: `n` is non-null and writable.
        unsafe { n.write(got as u32) };
        Ok(())
    })
}

/// Stops the poll thread — letting everything submitted complete within
/// `timeout_ms` (then aborting), or at once when `abort` is non-zero (every
/// outstanding request completes with a flush error) — and writes what it did to
/// `*stats` (may be null). Events not taken yet are lost with the handle, which is
/// stale after.
///
/// Errors: `VQP_ERR_NULL`, `VQP_ERR_STALE_HANDLE`, `VQP_ERR_STATE` (the thread
/// panicked).
///
/// Thread-safety: not while another thread is in a call on this app handle.
///
/// # Safety
/// `stats` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn vqp_app_stop(
    a: vqp_app,
    timeout_ms: u32,
    abort: i32,
    stats: *mut vqp_poller_stats,
) -> vqp_status {
    guard(|| {
        if a.handle == 0 {
            return Err(Fail::null("app handle is null"));
        }
        let mut h = APPS.remove(a.handle)?;
        let Some(thread) = h.thread.take() else {
            return Err(Fail::new(
                VQP_ERR_STATE,
                "the poll thread was stopped already",
            ));
        };
        let timeout = Duration::from_millis(u64::from(timeout_ms));
        let s: Stats = if abort != 0 {
            thread.abort(timeout)?
        } else {
            thread.drain(timeout)?
        };
        if !stats.is_null() {
            let v = vqp_poller_stats {
                submitted: s.submitted,
                completed: s.completed,
                rejected: s.rejected,
                backpressure: s.backpressure,
                rounds: s.rounds,
                sleeps: s.sleeps,
                outstanding: s.outstanding as u64,
                undelivered: s.undelivered.len() as u64,
                aborted: u32::from(s.aborted),
                timed_out: u32::from(s.timed_out),
            };
            // SAFETY: `stats` is non-null and writable.
            unsafe { stats.write(v) };
        }
        Ok(())
    })
}
