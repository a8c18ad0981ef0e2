//! softverbs across processes: the devices, QP numbers and data path that every process
//! of a user on one machine shares, as `rdma_rxe` and `siw` are shared through the
//! kernel — here with no kernel module, no root and no daemon.
//!
//! # The namespace
//! A directory ([`dir`]: `$VQP_SOFT_DIR`, else `/dev/shm/vqp-softverbs-<uid>`, mode
//! 0700) holds the files below. The directory and every file are opened without
//! following symlinks and refused unless the effective user owns them and group and
//! others cannot write them: their contents steer where our data goes.
//! - `registry-2` ([`registry`]): a fixed-size file mapped `MAP_SHARED` by every process,
//!   the machine-wide QP number table. A number is allocated by a compare-and-swap of
//!   its slot, so numbers are unique across processes; a full table makes
//!   `ibv_create_qp` fail with `ENOMEM`. A slot names its owner
//!   (process id and a per-process random token) and device, so `(device, QPN)`
//!   resolves to the owning process. LIDs and GIDs stay derived from the device index,
//!   the same in every process. The table also records the namespace's device count,
//!   the most any process joining it had (it only grows; it is informational).
//! - `proc-<pid>-<token>`, one per process: its liveness lock, its inbox and its
//!   exports ([`exports`]: its QPs' state and its memory keys, for one-sided
//!   operations that requesters execute themselves). The
//!   process holds an exclusive `flock` on it for its lifetime; a lock another process
//!   *can* take means the owner is dead (the kernel drops the locks of a crashed
//!   process), and its file and QP numbers are then reclaimed ([`reclaim`]: when a
//!   process joins, every second from its service thread, and when the table is full,
//!   each time a bounded amount of work). The file is created under a temporary name,
//!   locked, then renamed, so nobody ever sees it unlocked.
//!
//! A namespace that cannot be used (refused, damaged, or of another format) is reported
//! once on stderr, and every `ibv_create_qp` then fails with an errno
//! ([`SharedError::errno`]) rather than creating a QP that no other process can reach.
//!
//! # The data path: requester-executed WQEs, responder-executed in the peer
//! In one process the engine's requester executes a WQE completely, responder side
//! included. For a responder QP owned by another process (the engine's namespace route):
//! 1. the requester checks its local buffers (lkey, PD, bounds, access) as always and
//!    appends a request record to the owner's inbox ([`inbox`]): the operation, rkey,
//!    remote address, immediate, and either the inline bytes or the requester's own
//!    *address ranges* (its validated SGEs). The WQE stays in flight; several may be
//!    pipelined per QP;
//! 2. the owner (its service thread, or any `poll_cq` of it) runs the request through
//!    the very responder code the in-process path uses (connected back, QP state,
//!    access flags, rkey/PD/bounds against its own key table, receive queue, RNR,
//!    receive completion), with a data mover that reads the requester's ranges with
//!    `process_vm_readv` straight into registered memory (SEND, WRITE) or writes them
//!    with `process_vm_writev` (READ data, an atomic's original value). Atomics run in
//!    the owner under the same atomic instructions as local ones, so they are atomic
//!    against every other process's atomics on that address: all of them execute there;
//! 3. the answer (`Ok(byte_len)`, `Rnr(timer)` or `Error(status)`) goes back the same way
//!    to the requester's inbox, which completes the WQE in order.
//!
//! An RDMA WRITE or READ that ends a QP's outstanding work (nothing of the QP in flight,
//! nothing queued behind it) skips steps 1–3 when it would succeed: the requester checks
//! it against the owner's [`exports`] and copies itself (`engine::route::namespace::direct`), as a
//! NIC serves a one-sided operation without the responder's CPU — a responder that
//! spins on its buffer, or is descheduled, or stopped, does not delay it.
//!
//! Why this mechanism: `process_vm_readv`/`writev` move the bytes **once**, from one
//! process's private memory into the other's, with no shared bounce buffer and no
//! registration-time setup; a socket or pipe would copy twice (into the kernel and out)
//! and need a second thread to drain it. Registered memory stays ordinary private
//! memory (`malloc`, the stack, anything), as the verbs API promises. Only small
//! fixed-size records cross the shared-memory ring, and a futex in each inbox wakes a
//! sleeping owner without a syscall when it is already awake.
//!
//! # Order, retries and failures
//! Each request carries the requester's connection id and sequence number (a PSN). The
//! responder executes a QP's requests in sequence and drops any out of sequence, so
//! after an RNR NAK the requester re-sends from the NAKed WQE and order within the QP
//! holds, as on the wire. A request for a QP that does not exist or is not connected to
//! its sender is answered "not taken", and the requester re-sends from it after its
//! local ACK timeout, `retry_cnt` times, before it completes with
//! `IBV_WC_RETRY_EXC_ERR` (on the wire the responder drops such a packet and the
//! requester's timer expires; the answer stands for that expiry, which a live owner's
//! silence would never give). Liveness is checked by the requester: when a response is later
//! than the QP's transport timeout (`4.096 µs · 2^timeout · (retry_cnt + 1)`, clamped to
//! 5 ms … 4 s) and the owner's lock can be taken, the WQE completes with
//! `IBV_WC_RETRY_EXC_ERR` and the QP goes to error; a live but slow owner is waited for.
//! When the requester died, the responder's `process_vm_*` fails with `ESRCH` and the
//! request is dropped without consuming a receive. `EPERM` (Yama's `ptrace_scope` or
//! seccomp) is reported once on stderr and completes the WQE with
//! `IBV_WC_REM_OP_ERR`; at start-up the provider calls `prctl(PR_SET_PTRACER_ANY)` so
//! that `ptrace_scope = 1` does not get in the way.
//!
//! UC and UD requests carry their type (a responder answers only its own type). Their
//! requester still waits for the answer — it tells that the data was taken from its
//! buffers — but completes successfully whatever it says, and a dead owner completes
//! everything in flight, as nothing was acknowledged on the wire. A UD datagram has no
//! sequence (nothing is re-sent on UD; it names its Q_Key in the record's `rkey`), and
//! a UD QP's requests in flight go to one process at a time, so that answers from
//! different processes cannot complete its WQEs out of order.
//!
//! In-process work never enters this module: the engine takes the remote path only when
//! the peer QP is not found in the process, so in-process WQEs gain no lock, syscall or
//! allocation.

#[allow(unsafe_code)]
pub(crate) mod sys;

pub(crate) mod dir;
mod error;
pub(crate) mod exports;
pub(crate) mod inbox;
mod outbox;
pub(crate) mod reclaim;
pub(crate) mod registry;
mod service;

pub(crate) use error::SharedError;
pub(crate) use outbox::Ack;
use service::{on_exit, Consumer};

use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::region::MrInfo;
pub use dir::ENV_DIR;
use dir::{Create, FileError, NsDir};
use exports::{Exports, QpView};
use inbox::{Inbox, Record};
use reclaim::proc_name;
use registry::Registry;

/// A process instance: its id and a random token (a reused pid gets a new token).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Owner {
    pub pid: u32,
    /// 24 bits, never 0.
    pub token: u32,
}

impl Owner {
    /// The process as one number: what a slot of an inbox it claims names (56 bits).
    pub(crate) fn id(self) -> u64 {
        u64::from(self.pid) << 24 | u64::from(self.token & 0x00ff_ffff)
    }

    /// The process an [`Owner::id`] names.
    pub(crate) fn from_id(id: u64) -> Owner {
        Owner {
            pid: (id >> 24) as u32,
            token: (id & 0x00ff_ffff) as u32,
        }
    }
}

/// This process's view of the namespace.
pub(crate) struct Shared {
    dir: NsDir,
    /// This process.
    pub me: Owner,
    pub registry: Registry,
    /// Our own inbox (we consume it).
    pub inbox: Inbox,
    /// What we publish for requesters that execute one-sided operations themselves.
    exports: Exports,
    /// The regions registered before we joined have been exported.
    mrs_exported: std::sync::Once,
    /// Holds our liveness lock for the process's lifetime.
    _lock_file: File,
    /// Other processes we have sent to.
    peers: Mutex<HashMap<Owner, Arc<Peer>>>,
    /// Serialises consumers of our inbox (the service thread, polling threads), and
    /// holds what a consumer works with.
    consuming: Mutex<Consumer>,
    /// Responses waiting for room in their requester's inbox.
    outbox: Mutex<std::collections::VecDeque<outbox::Pending>>,
    /// The service thread, once started; joined at exit (a thread left running or
    /// unjoined is memory a leak checker reports).
    service: OnceLock<Mutex<Option<std::thread::JoinHandle<()>>>>,
    stop: AtomicBool,
    running: AtomicBool,
    /// Where this process's next file sweep starts ([`reclaim::sweep`]).
    sweep_cursor: AtomicUsize,
    /// What this process serves, handed over when it joined: the records of our inbox
    /// go to it.
    endpoint: &'static dyn Endpoint,
}

/// What the namespace serves and asks about, handed over when the process joins: the
/// provider, whose engine runs the requests and answers our inbox brings
/// (`engine::route`). The namespace calls it and imports nothing of what is above it.
pub(crate) trait Endpoint: Sync {
    /// This process's device count.
    fn devices(&self) -> usize;
    /// One bit per device (the first 64) whose link is down.
    fn links_down(&self) -> u64;
    /// Calls `f` with the key and description of every registered region.
    fn each_region(&self, f: &mut dyn FnMut(u32, &MrInfo));
    /// Handles one record of our inbox (`payload`: its payload bytes); an answer may be
    /// left in `ack` ([`Shared::flush_ack`] sends it).
    fn deliver(
        &'static self,
        sh: &'static Shared,
        rec: Record,
        payload: &[u8],
        ack: &mut Option<Ack>,
    );
    /// Fails the requests whose owner died past their deadline; whether any request
    /// is still watched.
    fn check_deadlines(&self, sh: &Shared) -> bool;
    /// A counter that moves whenever a thread of ours polls.
    fn activity(&self) -> u64;
    /// Whether a thread polled since the counter read `last` (it then drains the
    /// inbox itself).
    fn polling_since(&self, last: u64) -> bool;
    /// How long the service thread leaves the inbox to a thread that polls before it
    /// looks again.
    fn idle_grace(&self) -> Duration;
    /// Calls `f` with the device index and GID of every RoCE GID of ours (published so
    /// that other processes resolve them).
    fn each_gid(&self, f: &mut dyn FnMut(usize, &[u8; 16]));
    /// Looks at what the service thread watches besides the inbox (the interfaces of
    /// RoCE ports); `Some(period)`: call again within that period.
    fn watch(&self) -> Option<Duration>;
    /// One turn of the thread that serves other machines (`crate::transport`'s
    /// `machine`): their messages, then a sleep until something comes; a nap instead
    /// while a thread of ours polls (it serves them as it does), `last_poll` being
    /// [`Endpoint::activity`] at the previous turn. False when this process cannot
    /// serve them (the thread ends).
    fn machine_turn(&'static self, last_poll: &mut u64) -> bool;
}

static SHARED: OnceLock<Result<Shared, SharedError>> = OnceLock::new();

/// The namespace, joined on first use for the provider `p` (its device count, its
/// QPs and regions), or why it cannot be used (printed once, when first found).
pub(crate) fn init(p: &'static dyn Endpoint) -> Result<&'static Shared, &'static SharedError> {
    let s = SHARED
        .get_or_init(|| {
            let joined = Shared::join(p);
            if let Err(e) = &joined {
                eprintln!(
                    "vqp-softverbs: the shared namespace cannot be used, so no QP can be \
                     created: {e}"
                );
            }
            joined
        })
        .as_ref()?;
    // Regions registered before the process joined (a program registers its buffers
    // before it creates its QPs). Under the table's read lock, once the namespace is
    // visible: a region registered meanwhile is exported by its own `export_mr`.
    s.mrs_exported.call_once(|| {
        s.endpoint
            .each_region(&mut |key, info| s.exports.export_mr(key, info));
    });
    Ok(s)
}

/// The namespace if this process has joined it (for the exit handler, which is handed
/// nothing; everything else holds the namespace it joined, see `crate::transport`).
fn current() -> Option<&'static Shared> {
    SHARED.get().and_then(|r| r.as_ref().ok())
}

fn random_token() -> u32 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    let t = (h.finish() as u32) & 0x00ff_ffff;
    t.max(1)
}

impl Shared {
    fn join(endpoint: &'static dyn Endpoint) -> Result<Shared, SharedError> {
        sys::allow_any_tracer();
        let dir = NsDir::open()?;
        let registry = Registry::attach(&dir, endpoint.devices() as u32)?;
        let (me, file) = Self::make_file(&dir)?;
        let inboxed =
            Inbox::map(&file, true, me.id()).and_then(|ib| Ok((ib, Exports::map(&file, true)?)));
        let (inbox, exports) = match inboxed {
            Ok(x) => x,
            Err(e) => {
                let _ = dir.remove(&proc_name(me));
                return Err(SharedError::Inbox(dir.join(&proc_name(me)), e));
            }
        };
        let mut slot = 0;
        endpoint.each_gid(&mut |dev, gid| {
            exports.set_gid(slot, dev, gid);
            slot += 1;
        });
        sys::at_exit(on_exit);
        let sweep_cursor = AtomicUsize::new(0);
        reclaim::sweep(&dir, &registry, me, &sweep_cursor);
        Ok(Shared {
            dir,
            me,
            registry,
            inbox,
            exports,
            mrs_exported: std::sync::Once::new(),
            _lock_file: file,
            peers: Mutex::new(HashMap::new()),
            consuming: Mutex::new(Consumer {
                payload: Box::new([0; inbox::PAYLOAD]),
                ack: None,
            }),
            outbox: Mutex::new(std::collections::VecDeque::new()),
            service: OnceLock::new(),
            stop: AtomicBool::new(false),
            running: AtomicBool::new(false),
            sweep_cursor,
            endpoint,
        })
    }

    /// Creates this process's file, locked and sized, under a temporary name then
    /// renamed, so that nobody sees it unlocked. A sweep by another process may take a
    /// temporary file it finds unlocked for a dead process's: then we try another name.
    fn make_file(dir: &NsDir) -> Result<(Owner, File), SharedError> {
        let pid = std::process::id();
        let mut tries = 0;
        loop {
            tries += 1;
            let me = Owner {
                pid,
                token: random_token(),
            };
            let tmp = format!("tmp-{}-{}", me.pid, me.token);
            let file = match dir.open_file(&tmp, Create::New) {
                Ok(f) => f,
                Err(FileError::Io(e)) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(FileError::Io(e)) => return Err(SharedError::Inbox(dir.join(&tmp), e)),
                Err(FileError::Refused(why)) => {
                    return Err(SharedError::Refused(dir.join(&tmp), why))
                }
            };
            let made = sys::flock(&file, libc::LOCK_EX | libc::LOCK_NB)
                .and_then(|ok| ok.then_some(()).ok_or(io::ErrorKind::WouldBlock.into()))
                .and_then(|()| file.set_len(exports::FILE_SIZE as u64))
                .and_then(|()| dir.rename(&tmp, &proc_name(me)));
            match made {
                Ok(()) => return Ok((me, file)),
                Err(e)
                    if tries < 8
                        && matches!(
                            e.kind(),
                            io::ErrorKind::WouldBlock | io::ErrorKind::NotFound
                        ) =>
                {
                    continue
                }
                Err(e) => {
                    let _ = dir.remove(&tmp);
                    return Err(SharedError::Inbox(dir.join(&tmp), e));
                }
            }
        }
    }

    /// Whether process `o` is alive (see [`reclaim::is_alive`]: a dead owner's numbers
    /// and file are reclaimed on the way).
    pub(crate) fn is_alive(&self, o: Owner) -> bool {
        reclaim::is_alive(&self.dir, &self.registry, self.me, o)
    }

    /// One bounded sweep of dead processes' files and numbers.
    pub(crate) fn sweep(&self) -> reclaim::Swept {
        reclaim::sweep(&self.dir, &self.registry, self.me, &self.sweep_cursor)
    }

    /// Process `o` as we send to it, its file mapped on first use; `None` when it is
    /// gone (or its file is of another format).
    pub(crate) fn peer(&self, o: Owner) -> Option<Arc<Peer>> {
        if o == self.me {
            return None;
        }
        let mut peers = self.peers.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(p) = peers.get(&o) {
            return Some(Arc::clone(p));
        }
        let f = match self.dir.open_file(&proc_name(o), Create::No) {
            Ok(f) => f,
            Err(FileError::Refused(why)) => {
                static REPORTED: AtomicBool = AtomicBool::new(false);
                if !REPORTED.swap(true, Ordering::Relaxed) {
                    eprintln!(
                        "vqp-softverbs: {} {why}; refused, its QPs cannot be reached",
                        self.dir.join(&proc_name(o)).display()
                    );
                }
                return None;
            }
            Err(FileError::Io(_)) => return None,
        };
        if f.metadata().ok()?.len() != exports::FILE_SIZE as u64 {
            return None;
        }
        let p = Arc::new(Peer {
            owner: o,
            inbox: Arc::new(Inbox::map(&f, false, self.me.id()).ok()?),
            exports: Exports::map(&f, false).ok()?,
            accessor: OnceLock::new(),
            seen_alive_ms: AtomicU64::new(0),
            epoch: Instant::now(),
        });
        peers.insert(o, Arc::clone(&p));
        Some(p)
    }

    /// The inbox of process `o` (see [`Shared::peer`]).
    pub(crate) fn peer_inbox(&self, o: Owner) -> Option<Arc<Inbox>> {
        self.peer(o).map(|p| Arc::clone(&p.inbox))
    }

    /// Forgets a dead peer's mapping.
    pub(crate) fn forget_peer(&self, o: Owner) {
        self.peers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&o);
    }

    /// Allocates a machine-wide QP number; when the table is full, reclaims what a
    /// bounded sweep finds of dead processes and tries once more.
    pub(crate) fn alloc_qpn(&self) -> Option<u32> {
        self.registry.alloc(self.me).or_else(|| {
            self.sweep();
            self.registry.alloc(self.me)
        })
    }
}

/// Another process as a requester of ours sees it.
pub(crate) struct Peer {
    pub owner: Owner,
    pub inbox: Arc<Inbox>,
    pub exports: Exports,
    /// Our accessor entry in its exports (`None`: none was free).
    accessor: OnceLock<Option<usize>>,
    /// When its liveness was last confirmed (ms since `epoch`), for [`Peer::alive`].
    seen_alive_ms: AtomicU64,
    epoch: Instant,
}

impl Peer {
    /// Our accessor entry in this peer's exports, claimed on first use.
    pub(crate) fn accessor(&self, sh: &Shared) -> Option<usize> {
        *self
            .accessor
            .get_or_init(|| self.exports.claim(sh.me, &|o| sh.is_alive(o)))
    }

    /// Whether the process still lives, confirmed by its liveness lock at most
    /// [`ALIVE_RECHECK`] ago. A copy by process id to a process that died answers `ESRCH`
    /// — unless the id was given to a new process meanwhile; the recheck bounds the time
    /// in which that could happen unnoticed.
    pub(crate) fn alive(&self, sh: &Shared) -> bool {
        let now = self.epoch.elapsed().as_millis() as u64 + 1;
        let seen = self.seen_alive_ms.load(Ordering::Relaxed);
        if seen != 0 && now - seen.min(now) < ALIVE_RECHECK.as_millis() as u64 {
            return true;
        }
        let alive = sh.is_alive(self.owner);
        if alive {
            self.seen_alive_ms.store(now, Ordering::Relaxed);
        }
        alive
    }
}

/// How long a peer's liveness, once confirmed, is trusted by the direct path.
const ALIVE_RECHECK: Duration = Duration::from_millis(100);

impl Shared {
    /// The device index of the RoCE GID `gid` in another live process of the namespace
    /// (its exports), if one has it. Reads every process's file: for a miss of the
    /// caller's cache only.
    pub(crate) fn find_gid(&self, gid: &[u8; 16]) -> Option<usize> {
        self.dir
            .names()
            .iter()
            .filter(|n| n.starts_with("proc-"))
            .filter_map(|n| reclaim::owner_of_name(n))
            .filter(|o| *o != self.me)
            .find_map(|o| {
                let peer = self.peer(o)?;
                let dev = peer.exports.gid_device(gid)?;
                peer.alive(self).then_some(dev)
            })
    }

    /// Publishes whether our QP `qpn` accepts one-sided requests now, and from whom
    /// (see [`exports`]).
    pub(crate) fn export_qp(&self, qpn: u32, view: Option<QpView>) {
        self.exports.set_qp(qpn, view);
    }

    /// Publishes the port of our UCX listener (0: none).
    pub(crate) fn export_ucx_port(&self, port: u16) {
        self.exports.set_ucx_port(port);
    }

    /// The UCX listener port of the live process of the namespace that owns QP `qpn` of
    /// device `dev`, if one does and it listens: the answer to another machine's
    /// lookup (`crate::ucx::lookup`).
    pub(crate) fn serving_port(&self, dev: usize, qpn: u32) -> Option<u16> {
        let (owner, _) = self.registry.lookup(qpn, dev)?;
        if owner == self.me {
            return self.exports.ucx_port();
        }
        let peer = self.peer(owner)?;
        let port = peer.exports.ucx_port()?;
        peer.alive(self).then_some(port)
    }

    /// Publishes which of our devices' links are down.
    pub(crate) fn export_links(&self) {
        self.exports.set_down(self.endpoint.links_down());
    }

    /// Publishes a region just registered under `key`.
    pub(crate) fn export_mr(&self, key: u32, info: &MrInfo) {
        self.exports.export_mr(key, info);
    }

    /// Withdraws the region of `key`, returning once no other process copies to or from
    /// it; false when it gave up waiting for a stopped process ([`exports::REVOKE_LIMIT`]).
    pub(crate) fn revoke_mr(&self, key: u32) -> bool {
        self.exports.revoke_mr(key, &|o| self.is_alive(o))
    }
}

/// How an XRC domain was opened (see [`xrcd_hold`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum XrcdOpen {
    /// No process of the namespace had it open: this one created it.
    Created,
    /// Another opener (this process or another) holds it.
    Existing,
}

/// A hold on a file-named XRC domain (see [`xrcd_hold`]); released when dropped.
pub(crate) struct XrcdHold {
    file: std::fs::File,
    ns: dir::NsDir,
    name: String,
}

impl Drop for XrcdHold {
    /// The last holder (the one that gets the exclusive lock) removes the file, under
    /// that lock, so the namespace keeps no file of a domain nobody has; an opener that
    /// reached the file meanwhile finds it unlinked and starts again.
    fn drop(&mut self) {
        if let Ok(true) = sys::flock(&self.file, libc::LOCK_EX | libc::LOCK_NB) {
            if same_file(&self.ns, &self.name, &self.file) {
                let _ = self.ns.remove(&self.name);
            }
        }
    }
}

/// Whether `name` in the namespace is still the file `f` is open on (not unlinked, not
/// replaced by a new one).
fn same_file(ns: &dir::NsDir, name: &str, f: &std::fs::File) -> bool {
    use std::os::unix::fs::MetadataExt;
    let now = ns.open_file(name, dir::Create::No);
    match (
        now.and_then(|n| n.metadata().map_err(dir::FileError::Io)),
        f.metadata(),
    ) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

/// Takes a hold on the XRC domain of device `dev` named by the file (`st_dev`,
/// `st_ino`), machine-wide: the namespace's `xrcd-<dev>-<st_dev>-<ino>` file, on which
/// every holder keeps a shared `flock` (released by the kernel when the holder exits).
/// Whether the domain exists is whether anyone holds the lock; the kernel's rules for
/// `ibv_open_xrcd` (`ib_uverbs_open_xrcd`) follow: a domain nobody holds without
/// `O_CREAT` is `EAGAIN`, one somebody holds with `O_EXCL` is `EINVAL`. The hold lasts
/// as long as the returned [`XrcdHold`].
pub(crate) fn xrcd_hold(
    dev: usize,
    st_dev: u64,
    ino: u64,
    create: bool,
    excl: bool,
) -> Result<(XrcdHold, XrcdOpen), i32> {
    let errno = |e: std::io::Error| e.raw_os_error().unwrap_or(libc::EIO);
    let name = format!("xrcd-{dev}-{st_dev:x}-{ino:x}");
    loop {
        let ns = dir::NsDir::open().map_err(|e| e.errno())?;
        let file = ns
            .open_file(&name, dir::Create::IfMissing)
            .map_err(|e| match e {
                dir::FileError::Io(e) => e.raw_os_error().unwrap_or(libc::EIO),
                dir::FileError::Refused(_) => libc::EACCES,
            })?;
        // Alone (an exclusive lock is granted): nobody holds the domain.
        let alone = sys::flock(&file, libc::LOCK_EX | libc::LOCK_NB).map_err(errno)?;
        if alone && !same_file(&ns, &name, &file) {
            // The last holder removed it after we opened it: start again.
            continue;
        }
        let how = if alone {
            XrcdOpen::Created
        } else {
            XrcdOpen::Existing
        };
        let hold = XrcdHold {
            file,
            ns,
            name: name.clone(),
        };
        match how {
            // Dropping the hold removes the file we may have made.
            XrcdOpen::Created if !create => return Err(libc::EAGAIN),
            XrcdOpen::Existing if excl => return Err(libc::EINVAL),
            _ => {}
        }
        // Converts (or waits for a holder's exclusive lock to become) a shared one; a
        // file its last holder removed meanwhile is not the domain's any more.
        sys::flock(&hold.file, libc::LOCK_SH).map_err(errno)?;
        if same_file(&hold.ns, &hold.name, &hold.file) {
            return Ok((hold, how));
        }
    }
}
