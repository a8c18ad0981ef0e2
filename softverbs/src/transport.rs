//! The engine's one way out of its process: the shared namespace ([`crate::shared`]),
//! as this process joined it. The engine owns a [`Transport`] (made with it, handed to
//! nothing else by a global) and reaches other processes only through it: it sends a
//! WQE whose peer QP is not in the process ([`Transport::namespace`]), serves the
//! inbox while it polls ([`Transport::poll`]), and publishes or withdraws what one-sided
//! requesters of other processes may touch (QPs, regions, links).
//!
//! In-process delivery needs no transport state: the requester's thread runs the
//! responder itself, over the engine's in-process data mover, with no lock, record or
//! syscall added. A process that never joins the namespace (it created no QP) pays one
//! relaxed load per poll here.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

use crate::region::MrInfo;
use crate::shared::exports::QpView;
use crate::shared::{self, registry, Endpoint, Owner, Shared, SharedError};

/// This process's transport to other processes: the shared namespace once joined.
#[derive(Default)]
pub(crate) struct Transport {
    /// The namespace, set when this transport joined it ([`Transport::join`]).
    ns: OnceLock<&'static Shared>,
}

impl Transport {
    /// Joins the namespace for `endpoint` (once; later calls answer the same), or says
    /// why it cannot be used (printed once, when first found).
    pub(crate) fn join(
        &self,
        endpoint: &'static dyn Endpoint,
    ) -> Result<&'static Shared, &'static SharedError> {
        if let Some(s) = self.ns.get() {
            return Ok(s);
        }
        let s = shared::init(endpoint)?;
        Ok(self.ns.get_or_init(|| s))
    }

    /// The namespace if this process has joined it.
    #[inline]
    pub(crate) fn namespace(&self) -> Option<&'static Shared> {
        self.ns.get().copied()
    }

    /// Joins the namespace and reserves a QP number. The error is the errno for
    /// `ibv_create_qp`: the namespace's ([`SharedError::errno`]), or `ENOMEM` when every
    /// number belongs to a live process — what mlx5 reports for a QP the device has no
    /// resources for (the firmware's `MLX5_CMD_STAT_LIM_ERR` becomes `-ENOMEM` in the
    /// kernel's `mlx5_cmd_check`, which `ibv_create_qp` returns as `errno`).
    pub(crate) fn alloc_qpn(&self, endpoint: &'static dyn Endpoint) -> Result<u32, i32> {
        let s = self.join(endpoint).map_err(SharedError::errno)?;
        s.alloc_qpn().ok_or(libc::ENOMEM)
    }

    /// Makes QP `qpn` of device `dev` findable by other processes, and starts serving
    /// them.
    pub(crate) fn publish(&self, qpn: u32, dev: usize) {
        if let Some(s) = self.namespace() {
            self.export_links();
            s.registry.publish(qpn, s.me, dev);
            s.start_service();
        }
    }

    /// Frees QP number `qpn`.
    pub(crate) fn release(&self, qpn: u32) {
        if let Some(s) = self.namespace() {
            s.registry.release(qpn, s.me);
        }
    }

    /// Joins the namespace (if it can be) and starts the service thread, which watches
    /// what [`Endpoint::watch`] names even before a QP exists.
    pub(crate) fn start(&self, endpoint: &'static dyn Endpoint) {
        if let Ok(s) = self.join(endpoint) {
            s.start_service();
        }
    }

    /// Ends the service thread's nap (a thread of ours started to wait for an event: no
    /// poll will drain the inbox meanwhile).
    pub(crate) fn nudge(&self) {
        if let Some(s) = self.namespace() {
            s.nudge();
        }
    }

    /// The polling path's hook: serves waiting records of our inbox. One relaxed load
    /// when there is nothing, and nothing at all in a process that never joined.
    #[inline]
    pub(crate) fn poll(&self, budget: usize) {
        if let Some(s) = self.namespace() {
            if s.inbox.maybe_ready() {
                s.drain(budget);
            }
        }
    }

    /// The device index of the RoCE GID `gid` in another live process of the namespace
    /// (its exports), if one has it. Reads every process's file: for a miss of the
    /// caller's cache only.
    pub(crate) fn find_gid(&self, gid: &[u8; 16]) -> Option<usize> {
        self.namespace()?.find_gid(gid)
    }

    /// Publishes whether our QP `qpn` accepts one-sided requests now, and from whom
    /// (see [`shared::exports`]).
    pub(crate) fn export_qp(&self, qpn: u32, view: Option<QpView>) {
        if let Some(s) = self.namespace() {
            s.export_qp(qpn, view);
        }
    }

    /// Publishes which of our devices' links are down.
    pub(crate) fn export_links(&self) {
        if let Some(s) = self.namespace() {
            s.export_links();
        }
    }

    /// Publishes a region just registered under `key`.
    pub(crate) fn export_mr(&self, key: u32, info: &MrInfo) {
        if let Some(s) = self.namespace() {
            s.export_mr(key, info);
        }
    }

    /// Withdraws the region of `key`, returning once no other process copies to or
    /// from it (the caller then deregisters it).
    pub(crate) fn revoke_mr(&self, key: u32) {
        static REPORTED: AtomicBool = AtomicBool::new(false);
        if let Some(s) = self.namespace() {
            if !s.revoke_mr(key) && !REPORTED.swap(true, Ordering::Relaxed) {
                eprintln!(
                    "vqp-softverbs: a deregistration waited {:?} for another process's copy \
                     to the region and went on (that process is stopped)",
                    shared::exports::REVOKE_LIMIT
                );
            }
        }
    }

    /// The process id that owns QP `qpn` of device `device` in the shared namespace, if
    /// a live process does (a dead owner's number is reclaimed on the way).
    pub(crate) fn qp_owner_pid(
        &self,
        endpoint: &'static dyn Endpoint,
        device: usize,
        qpn: u32,
    ) -> Option<u32> {
        let s = self.join(endpoint).ok()?;
        let (owner, word) = s.registry.lookup(qpn, device)?;
        if s.is_alive(owner) {
            Some(owner.pid)
        } else {
            s.registry.reclaim(qpn, word);
            s.forget_peer(owner);
            None
        }
    }

    /// The live process other than this one that owns QP `qpn` of device `device`.
    pub(crate) fn qp_owner(
        &self,
        endpoint: &'static dyn Endpoint,
        device: usize,
        qpn: u32,
    ) -> Option<Owner> {
        let s = self.join(endpoint).ok()?;
        self.qp_owner_pid(endpoint, device, qpn)?;
        let (owner, _) = s.registry.lookup(qpn, device)?;
        (owner != s.me).then_some(owner)
    }

    /// Reserves QP numbers for this process until at most `leave_free` of the
    /// machine-wide table are free, and returns how many it took (freed when the
    /// process exits). For tests of a full table; `None` when the namespace cannot be
    /// used.
    pub(crate) fn hold_qp_numbers(
        &self,
        endpoint: &'static dyn Endpoint,
        leave_free: usize,
    ) -> Option<usize> {
        let s = self.join(endpoint).ok()?;
        let mut n = 0;
        while s.registry.in_use() + (leave_free as u64) < registry::SLOTS as u64 {
            if s.registry.alloc(s.me).is_none() {
                break;
            }
            n += 1;
        }
        Some(n)
    }
}
