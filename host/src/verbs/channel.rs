//! [`CompletionChannel`] and [`CqEvent`]: blocking until a CQ has completions.

use core::ffi::c_void;
use core::ptr::NonNull;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;

use super::context::{Context, ContextInner};
use super::cq::CompletionQueue;
use crate::error::{last_errno, Error, Result};
use crate::sys;

/// A completion channel (`struct ibv_comp_channel`): a file descriptor on which armed
/// CQs report that they have completions.
///
/// Cheap to clone; CQs using the channel hold a reference, so it is destroyed after them.
#[derive(Clone)]
pub struct CompletionChannel {
    pub(crate) inner: Arc<ChannelInner>,
}

pub(crate) struct ChannelInner {
    pub(crate) ctx: Arc<ContextInner>,
    pub(crate) ch: NonNull<sys::ibv_comp_channel>,
}

// SAFETY: libibverbs is thread-safe; the channel pointer is only handed to its verbs.
unsafe impl Send for ChannelInner {}
// SAFETY: as above; nothing is mutated through `&ChannelInner`.
unsafe impl Sync for ChannelInner {}

impl Drop for ChannelInner {
    fn drop(&mut self) {
        // SAFETY: `ch` came from `ibv_create_comp_channel` and is destroyed once; CQs
        // using it hold `Arc<ChannelInner>` and are gone, so it is not busy.
        let _ = unsafe { (self.ctx.verbs.table().destroy_comp_channel)(self.ch.as_ptr()) };
    }
}

impl CompletionChannel {
    pub(crate) fn new(ctx: &Context) -> Result<Self> {
        // SAFETY: live context.
        let ch = unsafe { (ctx.inner.verbs.table().create_comp_channel)(ctx.inner.ctx.as_ptr()) };
        let ch = NonNull::new(ch).ok_or_else(|| Error::verbs_errno("ibv_create_comp_channel"))?;
        Ok(CompletionChannel {
            inner: Arc::new(ChannelInner {
                ctx: Arc::clone(&ctx.inner),
                ch,
            }),
        })
    }

    /// The raw channel, valid while `self` lives.
    pub fn as_raw(&self) -> *mut sys::ibv_comp_channel {
        self.inner.ch.as_ptr()
    }

    /// Makes [`get_cq_event`](Self::get_cq_event) return `EAGAIN` instead of blocking
    /// when no event is pending (for use with `poll`/`epoll` on [`as_raw_fd`]).
    ///
    /// [`as_raw_fd`]: AsRawFd::as_raw_fd
    pub fn set_nonblocking(&self, nonblocking: bool) -> Result<()> {
        let fd = self.as_raw_fd();
        // SAFETY: `fd` is the channel's open descriptor; F_GETFL takes no argument.
        let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
        if flags < 0 {
            return Err(Error::verbs_errno("fcntl(F_GETFL)"));
        }
        let flags = if nonblocking {
            flags | libc::O_NONBLOCK
        } else {
            flags & !libc::O_NONBLOCK
        };
        // SAFETY: as above; F_SETFL takes an int of flags.
        if unsafe { libc::fcntl(fd, libc::F_SETFL, flags) } < 0 {
            return Err(Error::verbs_errno("fcntl(F_SETFL)"));
        }
        Ok(())
    }

    /// Waits up to `timeout` for the channel's descriptor to become readable (an event
    /// is pending), with `poll(2)`; returns whether it did. Lets a caller bound how long
    /// it blocks, which [`get_cq_event`](Self::get_cq_event) alone cannot.
    ///
    /// # Errors
    /// [`Error::Verbs`] naming `poll` when the system call fails (other than `EINTR`,
    /// which counts as "not readable").
    pub fn wait_readable(&self, timeout: std::time::Duration) -> Result<bool> {
        Ok(self.wait_readable_or(None, timeout)?.0)
    }

    /// As [`wait_readable`](Self::wait_readable), also waking when `other` (another
    /// descriptor, e.g. an eventfd a submitter writes) becomes readable; returns
    /// whether the channel and whether `other` are readable.
    ///
    /// # Errors
    /// As [`wait_readable`](Self::wait_readable).
    pub fn wait_readable_or(
        &self,
        other: Option<RawFd>,
        timeout: std::time::Duration,
    ) -> Result<(bool, bool)> {
        let mut fds = [
            libc::pollfd {
                fd: self.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                // A negative descriptor is ignored by `poll`.
                fd: other.unwrap_or(-1),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        let ms = libc::c_int::try_from(timeout.as_millis()).unwrap_or(libc::c_int::MAX);
        // SAFETY: two valid `pollfd`s for the duration of the call.
        let rc = unsafe { libc::poll(fds.as_mut_ptr(), 2, ms) };
        if rc < 0 {
            let err = std::io::Error::last_os_error();
            if err.kind() == std::io::ErrorKind::Interrupted {
                return Ok((false, false));
            }
            return Err(Error::Verbs {
                function: "poll",
                source: err,
            });
        }
        let ready = |p: &libc::pollfd| rc > 0 && p.revents & libc::POLLIN != 0;
        Ok((ready(&fds[0]), ready(&fds[1])))
    }

    /// Waits for the next event of an armed CQ (`ibv_get_cq_event`). The event is
    /// acknowledged when the returned guard is dropped.
    ///
    /// A CQ cannot be destroyed while an event of it is unacknowledged
    /// (`ibv_destroy_cq` waits): drop the [`CqEvent`] before the last handle to its CQ,
    /// and never leak it.
    ///
    /// # Errors
    /// [`Error::Verbs`] naming `ibv_get_cq_event` (`EAGAIN` in non-blocking mode when no
    /// event is pending).
    pub fn get_cq_event(&self) -> Result<CqEvent<'_>> {
        let mut cq: *mut sys::ibv_cq = core::ptr::null_mut();
        let mut cq_context: *mut c_void = core::ptr::null_mut();
        // SAFETY: live channel; both out-pointers are writable.
        let rc = unsafe {
            (self.inner.ctx.verbs.table().get_cq_event)(
                self.inner.ch.as_ptr(),
                &mut cq,
                &mut cq_context,
            )
        };
        if rc != 0 {
            return Err(Error::Verbs {
                function: "ibv_get_cq_event",
                source: last_errno(),
            });
        }
        let cq = NonNull::new(cq).ok_or(Error::Verbs {
            function: "ibv_get_cq_event",
            source: std::io::Error::from_raw_os_error(libc::EIO),
        })?;
        Ok(CqEvent {
            channel: self,
            cq,
            cq_context,
        })
    }
}

impl AsRawFd for CompletionChannel {
    fn as_raw_fd(&self) -> RawFd {
        // SAFETY: live channel; `fd` is set at creation and never changes.
        unsafe { (*self.inner.ch.as_ptr()).fd }
    }
}

impl core::fmt::Debug for CompletionChannel {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("CompletionChannel")
            .field("fd", &self.as_raw_fd())
            .finish()
    }
}

/// One completion event, acknowledged (`ibv_ack_cq_events(cq, 1)`) on drop.
///
/// The CQ it names stays valid while the event is unacknowledged: `ibv_destroy_cq`
/// waits for the acknowledgement. The event borrows its channel, so the channel cannot be
/// destroyed under it:
///
/// ```compile_fail
/// # use vqp_host::Context;
/// # fn f(ctx: &Context) -> vqp_host::Result<()> {
/// let channel = ctx.create_comp_channel()?;
/// let event = channel.get_cq_event()?;
/// drop(channel); // error: `channel` is borrowed by `event`
/// # drop(event);
/// # Ok(())
/// # }
/// ```
#[must_use = "dropping the event acknowledges it; check which CQ it is for and re-arm"]
pub struct CqEvent<'ch> {
    channel: &'ch CompletionChannel,
    cq: NonNull<sys::ibv_cq>,
    cq_context: *mut c_void,
}

impl CqEvent<'_> {
    /// Whether the event belongs to `cq`.
    pub fn is_for(&self, cq: &CompletionQueue) -> bool {
        self.cq == cq.inner.cq
    }

    /// The raw CQ the event belongs to.
    pub fn cq_raw(&self) -> *mut sys::ibv_cq {
        self.cq.as_ptr()
    }

    /// The `cq_context` given at CQ creation (null for CQs made by this crate).
    pub fn cq_context(&self) -> *mut c_void {
        self.cq_context
    }
}

impl Drop for CqEvent<'_> {
    fn drop(&mut self) {
        // SAFETY: the CQ is live (its destroy waits for this acknowledgement) and the
        // event was received once, so it is acknowledged once.
        unsafe { (self.channel.inner.ctx.verbs.table().ack_cq_events)(self.cq.as_ptr(), 1) }
    }
}

impl core::fmt::Debug for CqEvent<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("CqEvent").field("cq", &self.cq).finish()
    }
}
