//! The engine's one way out of its process: the shared namespace ([`crate::shared`]),
//! as this process joined it. The engine owns a [`Transport`] (made with it, handed to
//! nothing else by a global) and reaches other processes only through it: the
//! namespace route sends a WQE whose peer QP is not in the process
//! ([`Transport::namespace`]), the inbox is served while the engine polls
//! ([`Transport::poll`]), and what one-sided requesters of other processes may touch
//! (QPs, regions, links) is published or withdrawn here.
//!
//! # Routes
//! Every WQE that leaves its requester goes through one interface, the engine's
//! `engine::route` (`route::send`). It resolves where the responder QP lives and hands
//! the WQE to that place's route; the engine's requester side names no route itself
//! (`tests/layers.rs` checks that nothing outside `engine::route` names a route, and
//! that no route names another). The routes are the variants of `route::Route`:
//!
//! | route | the responder QP | how the WQE travels | how its answer comes back |
//! |---|---|---|---|
//! | `Process` (`engine/route/process.rs`) | in this process | the requester's thread runs the responder (`engine::respond`) over plain copies | as the call's value, at once |
//! | `Namespace` (`engine/route/namespace/`) | another process of the shared namespace | a record in that process's inbox, or executed directly with `process_vm_writev`/`readv` (one-sided) | a response record in our inbox, drained by [`Transport::poll`] into `route::on_record`; a dead owner by `route::check_deadlines` |
//! | `Machine` (`engine/route/ucx/`) | on another machine: a RoCE port's destination GID that no device of the namespace has | an active message over UCP to the process serving it, found by a lookup ([`machine`]) | a response message (or one riding on a request), run into the route by the machine thread or, while one polls, a polling thread ([`Transport::serve_machine`]); nobody answering, by the route's own timer |
//! | `Nowhere` | no device answers to the address, or a link is down | nothing travels | at once: RC `IBV_WC_RETRY_EXC_ERR`, UC and UD complete |
//!
//! The contract each route keeps, whatever carries it:
//! - **In:** a WQE whose local buffers the requester has checked (lkey, PD, bounds,
//!   access; their spans, or its inline data), with its length checked against
//!   `MAX_MSG` and, for a datagram, the port's MTU and its Q_Key resolved. The route
//!   is called with the requester QP locked, and must not take a lock the engine's
//!   order puts before the requester QP (see `engine`'s docs: token → run queue →
//!   requester QP → responder QP → key table → SRQ → CQ → channel).
//! - **Out:** an `engine::Step`. `Done`: the WQE completed (its completion written if
//!   it was signaled), or it is in flight on a route that answers later, which then
//!   owns it until the answer. `Rnr(delay)`: the WQE is back at the head of the send
//!   queue and the QP waits (RNR NAK, a retransmission after the ACK timeout, or the
//!   way is full). `Failed`: it completed in error and the QP is in the error state.
//! - **The responder's checks are the engine's**: every route runs the request
//!   through `engine::respond` at the responder (or, for a one-sided operation it
//!   executes itself, makes exactly the checks `respond` would, against what the
//!   responder published, and hands anything else to the responder), so the QP state,
//!   connection, PD, rkey, bounds, access flags, RNR and the responder's error
//!   transition are the same on every route.
//! - **Completions** go to the requester's send CQ with the QP's own accounting of
//!   unsignaled WQEs (`engine::complete`'s `complete`, `fail`, `unanswered` where one
//!   WQE ends), at the point where the responder has taken the WQE: an answer that
//!   comes later completes the QP's oldest WQEs in posting order.
//! - **Order** within a QP is posting order on every route: a route that answers later
//!   keeps a sequence per connection and re-sends from the first unanswered WQE.
//! - **Lost requests** end as on the wire: a request nobody takes is retransmitted
//!   after the QP's ACK timeout, `retry_cnt` times, then fails with
//!   `IBV_WC_RETRY_EXC_ERR` (the QP's `timeout` and `retry_cnt` as `ibv_modify_qp(3)`
//!   describes them; `complete::unanswered`); an RNR NAK waits the responder's
//!   `min_rnr_timer` and counts against the requester's `rnr_retry`. Never a hang:
//!   a route that answers later is watched (`Engine::watch`) until its answer or its
//!   responder's death.
//! - **Cost**: the in-process route adds nothing to a WQE — no lock beyond the
//!   responder QP's, no record, allocation or system call, and no copy of the WQE (it
//!   goes from the send queue to its route by move; the routes are an enum matched
//!   inline, not trait objects). An in-process RDMA WRITE loop
//!   (`softverbs/examples/write_loop.rs` under callgrind) costs within 1% of what it
//!   cost when the engine called the responder itself.
//!
//! In-process delivery needs no transport state. A process that never joins the
//! namespace (it created no QP) pays one relaxed load per poll here.
//!
//! # The UCX route
//! The route to another machine (issue 29; `crate::ucx`, its design in that module's
//! docs) is the third variant beside the two above; the engine outside
//! `engine::route` knows nothing of it:
//! - `engine/route/mod.rs`, `resolve`: where a connected QP's address (its GRH's
//!   `dgid`, through `Tables::resolve_av`) or a datagram's address handle names no
//!   device of this process and no device another process of the namespace published
//!   ([`Transport::find_gid`]), on a RoCE port, the WQE takes
//!   `Route::Machine { gid, qpn }`;
//! - `engine/route/ucx/`: its requester (a request per WQE as an active message, the
//!   WQE kept in flight in the QP's state under `engine::qp::remote_state`, its timer)
//!   and its responder (each request run through `engine::respond` with a mover over
//!   the request's bytes, and answered);
//! - this file and [`machine`]: the UCX worker, the lookups asked and answered, the
//!   endpoints, and the machine thread that progresses them and hands what came to the
//!   route ([`Transport::serve_machine`], [`Transport::machine_reach`],
//!   [`Transport::machine_send`], [`Transport::machine_sleep`]). The thread is started
//!   once a context opened on a RoCE-bound device ([`Transport::start_machine`]); the
//!   namespace's service thread and [`Transport::poll`] do nothing for other machines,
//!   so the in-process and namespace routes pay nothing for it.
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

pub(crate) mod machine;
mod spare;

use crate::os::lock;
use crate::region::MrInfo;
use crate::shared::exports::QpView;
use crate::shared::{self, registry, Endpoint, Owner, Shared, SharedError};
use crate::ucx::lookup;
use machine::Machine;
pub(crate) use machine::{Ep, Incoming, MachineAddr, Reach};
use spare::Spare;

/// This process's transport to other processes: the shared namespace once joined.
#[derive(Default)]
pub(crate) struct Transport {
    /// The namespace, set when this transport joined it ([`Transport::join`]).
    ns: OnceLock<&'static Shared>,
    /// The bound interfaces' addresses other machines reach this process at, set when
    /// a context opens on a RoCE-bound device ([`Transport::start_machine`]).
    machine_addrs: OnceLock<Vec<MachineAddr>>,
    /// What serves other machines, made by the machine thread once the addresses are
    /// known ([`Transport::serve_machine`]); `None` inside when UCX cannot be used.
    machine: OnceLock<Option<&'static Mutex<Machine>>>,
    /// Payload buffers kept for the next message to or from another machine.
    spare: Arc<Spare>,
}

/// The lookup port: `VQP_SOFT_UCX_PORT`, else [`lookup::DEFAULT_PORT`].
fn lookup_port() -> u16 {
    std::env::var("VQP_SOFT_UCX_PORT")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&p| p != 0)
        .unwrap_or(lookup::DEFAULT_PORT)
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

    /// Loads UCX (once), on the calling thread: call it before starting threads of ours.
    /// As it loads, UCX's memory hooks patch `mmap`, `sbrk` and `brk` in place and move
    /// the program break up and back down to test them, which it does "during startup,
    /// before other threads could execute the modified functions" (UCX's
    /// `ucm_mmap_init`). Loaded by the machine thread, a `malloc` of the program's that
    /// grew the heap meanwhile found it cut back (SIGSEGV in glibc's `sysmalloc`, 2
    /// `ib_send_lat` clients of 96). Whether it loaded is told when the machine is made.
    pub(crate) fn load_ucx(&self) {
        let _ = crate::ucx::Ucp::get();
    }

    /// Starts serving other machines on the addresses `addrs` of this process's bound
    /// interfaces (the first call; later ones do nothing): it starts the machine
    /// thread, which makes a UCX worker per interface listening at one port on each
    /// address but the link-local ones, published in our exports, and a lookup socket
    /// at the lookup port of each, then serves them
    /// ([`Transport::serve_machine`], through [`Endpoint::machine_turn`]). Not made
    /// here: this runs inside `ibv_open_device`, and making a UCP context opens the
    /// verbs devices again (UCX's verbs component lists them even when its transports
    /// are off), which in a process whose libibverbs is softverbs re-enters it.
    pub(crate) fn start_machine(&self, endpoint: &'static dyn Endpoint, addrs: &[MachineAddr]) {
        if addrs.is_empty() || self.machine_addrs.get().is_some() {
            return;
        }
        let _ = self.machine_addrs.set(addrs.to_vec());
        // Before the thread that makes the machine starts: a process that exits while
        // it is being made waits for it (`park_machine`).
        crate::os::at_exit(park_machine);
        if let Ok(s) = self.join(endpoint) {
            s.start_service();
            let spawned = std::thread::Builder::new()
                .name("softverbs-machine".into())
                .spawn(move || {
                    let mut last_poll = endpoint.activity();
                    while endpoint.machine_turn(&mut last_poll) {}
                });
            if spawned.is_err() {
                eprintln!(
                    "vqp-softverbs: cannot start the thread that serves other machines; \
                     their requests are not answered"
                );
            }
        }
    }

    /// Whether this process serves other machines (its UCX worker is made): one load.
    #[inline]
    pub(crate) fn serves_machines(&self) -> bool {
        matches!(self.machine.get(), Some(Some(_)))
    }

    /// The machine thread's nap while a thread of ours polls (and serves other machines
    /// as it does). Returns false when the process is exiting (the thread then ends).
    pub(crate) fn machine_nap(&self, nap: Duration) -> bool {
        if self.namespace().is_some_and(|s| s.stopping()) {
            return false;
        }
        std::thread::sleep(nap);
        true
    }

    /// The machine thread's sleep: until UCX, a lookup or a sender has something for
    /// it, or `timeout`. Returns false when this process does not serve other machines,
    /// or is exiting (the thread then ends).
    pub(crate) fn machine_sleep(&self, timeout: Duration) -> bool {
        if self.namespace().is_some_and(|s| s.stopping()) {
            // The process is exiting: the thread ends, out of UCX's way.
            return false;
        }
        let m = match self.machine.get() {
            None => {
                std::thread::sleep(timeout.min(Duration::from_millis(1)));
                return true;
            }
            Some(None) => return false,
            Some(Some(m)) => m,
        };
        let Some(fds) = lock(m).arm() else {
            return true;
        };
        crate::os::wait_readable(&fds, timeout);
        true
    }

    /// Makes what serves other machines (see [`Transport::start_machine`]); what cannot
    /// be had is said once on stderr, and the rest goes on: without UCX (Debian's
    /// `libucx0`) no other machine reaches this process's QPs.
    fn make_machine(
        s: &Shared,
        addrs: &[MachineAddr],
        spare: &Arc<Spare>,
    ) -> Option<&'static Mutex<Machine>> {
        // The exit handler waits for this (see `park_machine`).
        let _making = lock(&MAKING);
        match Machine::new(addrs, lookup_port(), spare.clone()) {
            Ok((m, port)) => {
                s.export_ucx_port(port);
                // Lives as long as the process: the exit handler parks it.
                let m: &'static Mutex<Machine> = Box::leak(Box::new(Mutex::new(m)));
                let _ = PARKED_AT_EXIT.set(m);
                Some(m)
            }
            Err(e) => {
                eprintln!("vqp-softverbs: other machines cannot reach this process's QPs: {e}");
                None
            }
        }
    }

    /// The service thread's turn for other machines (`machine`'s docs): progresses the
    /// UCX worker, accepts connections, connects the lookups that found their process,
    /// answers the lookups waiting (`device_of` naming the device of a RoCE GID), and
    /// returns the messages that arrived for the engine's UCX route, with whether
    /// anything is going on (the thread then looks again soon). Nothing when this
    /// process does not serve other machines, or another thread is at it. `polling`:
    /// a polling thread's turn, which looks at the lookup sockets only now and then
    /// ([`machine`]'s `LOOKUP_TURNS`).
    pub(crate) fn serve_machine(
        &self,
        device_of: impl Fn(&[u8; 16]) -> Option<usize>,
        polling: bool,
    ) -> (Vec<Incoming>, bool) {
        let (Some(addrs), Some(s)) = (self.machine_addrs.get(), self.namespace()) else {
            return (Vec::new(), false);
        };
        let Some(m) = self
            .machine
            .get_or_init(|| Self::make_machine(s, addrs, &self.spare))
            .as_ref()
            .copied()
        else {
            return (Vec::new(), false);
        };
        let Ok(mut m) = m.try_lock() else {
            return (Vec::new(), true);
        };
        let (came, busy) = m.turn(|gid, qpn| s.serving_port(device_of(gid)?, qpn), polling);
        let active = busy || m.active();
        (came, active)
    }

    /// Whether a request to QP `qpn` at `gid` on another machine can be sent now
    /// ([`Reach`]); starts looking it up when nothing is known. Takes the worker lock:
    /// callable with a QP locked (`machine`'s lock order).
    /// `ifindex` names the interface of the requester's port; it is asked only when a
    /// lookup starts.
    pub(crate) fn machine_reach(
        &self,
        gid: &[u8; 16],
        qpn: u32,
        ifindex: impl FnOnce() -> u32,
    ) -> Reach {
        match self.machine.get() {
            None => Reach::Pending,
            Some(None) => Reach::Unreachable,
            Some(Some(m)) => lock(m).reach(gid, qpn, ifindex),
        }
    }

    /// The endpoint this process sends its requests to QP `qpn` at `gid` on, when it
    /// has one: where the answers to that QP's requests go too ([`machine::ANSWERED`]).
    pub(crate) fn machine_ready(&self, gid: &[u8; 16], qpn: u32) -> Option<Ep> {
        match self.machine.get() {
            Some(Some(m)) => lock(m).ready(gid, qpn),
            _ => None,
        }
    }

    /// Sends active message `id` ([`machine::REQUEST`] or [`machine::RESPONSE`]) with
    /// `header` and `payload` on endpoint `ep`; false when the endpoint failed (it is
    /// then forgotten, and the next [`Transport::machine_reach`] looks up again).
    pub(crate) fn machine_send(&self, ep: Ep, id: u16, header: &[u8], payload: Vec<u8>) -> bool {
        match self.machine.get() {
            Some(Some(m)) => lock(m).send(ep, id, header, payload),
            _ => false,
        }
    }

    /// A buffer of `len` bytes for a payload to another machine (given to
    /// [`Transport::machine_send`], which keeps it for the next one when UCP is done).
    pub(crate) fn machine_buffer(&self, len: usize) -> Vec<u8> {
        self.spare.take(len)
    }

    /// Keeps the payload of a message that came ([`Incoming::payload`]), or of an
    /// answer not sent, for the next message.
    pub(crate) fn machine_recycle(&self, b: Vec<u8>) {
        self.spare.give(b);
    }

    /// Holds back `answer` (a response's header, for a response with no payload) to go
    /// with the next request to `ep` ([`machine::ANSWERED`]), or at the next turn.
    pub(crate) fn machine_hold(&self, ep: Ep, answer: &[u8]) {
        if let Some(Some(m)) = self.machine.get() {
            lock(m).hold(ep, answer);
        }
    }

    /// Sends the answers held back ([`Transport::machine_hold`]) now: a QP is destroyed,
    /// and its process may exit before another turn (a NIC has acknowledged what it
    /// took by then).
    pub(crate) fn machine_flush(&self) {
        if let Some(Some(m)) = self.machine.get() {
            lock(m).flush_held();
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

/// The machine the exit handler parks (see [`park_machine`]).
static PARKED_AT_EXIT: OnceLock<&'static Mutex<Machine>> = OnceLock::new();

/// Held while the machine thread makes the machine (UCX's context and workers).
static MAKING: Mutex<()> = Mutex::new(());

/// At exit: takes the worker lock and keeps it, waiting 500 ms at most for the machine
/// thread to leave UCX, so that no thread of ours is inside UCX (progressing its
/// workers) while the process's exit runs UCX's own destructors (a write_bw server
/// was once seen to end in SIGSEGV after its run had passed). A thread that then wants
/// the lock waits until the process is gone. First it waits, as long, for a machine
/// being made, and keeps that from starting: a process that exited while the machine
/// thread was inside UCX's initialisation failed UCX's assertion in its destructor
/// (`vfs_obj.c`, in a test child that exits at once).
extern "C" fn park_machine() {
    let wait = || std::time::Instant::now() + Duration::from_millis(500);
    if let Some(g) = lock_until(&MAKING, wait()) {
        std::mem::forget(g);
    }
    if let Some(mut g) = PARKED_AT_EXIT.get().and_then(|m| lock_until(m, wait())) {
        // Answers held back go first: the process exits before another turn.
        g.flush_held();
        std::mem::forget(g);
    }
}

/// Locks `m` (poisoned or not), trying until `until`; `None` past it.
fn lock_until<T>(m: &Mutex<T>, until: std::time::Instant) -> Option<std::sync::MutexGuard<'_, T>> {
    loop {
        match m.try_lock() {
            Ok(g) => return Some(g),
            Err(std::sync::TryLockError::Poisoned(e)) => return Some(e.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) => {}
        }
        if std::time::Instant::now() > until {
            return None;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}
