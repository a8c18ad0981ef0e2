//! The process-wide provider: devices, the memory key table, the QP registry, the
//! progress engine and the fault configuration. Created on first use.
//!
//! Files: this one holds the provider and what it answers the engine
//! (`engine::Tables`) and the shared namespace (`shared::Endpoint`); `xrc_open` the
//! calls on an XRC receive QP that another process opened, which run the QP object's
//! verbs for it.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock, Weak};
use std::time::{Duration, Instant};

use crate::config::{self, DelayRule, FailRule, Progress, QpSelector, Reorder};
use crate::cq::CtxCore;
use crate::device::Device;
use crate::engine::{Engine, Tables};
use crate::mem::MrTable;
use crate::netdev::Netdev;
use crate::os::lock;
use crate::qp::{Qp, QpCore};
use crate::srq::SrqCore;
use crate::transport::Transport;

pub(crate) mod xrc_open;

/// Fault-injection rules in force.
#[derive(Debug, Default)]
pub(crate) struct Faults {
    pub fail: Vec<FailRule>,
    pub delay: Vec<DelayRule>,
}

impl Faults {
    /// The "fail after" count for a new QP, if a rule selects it (the last rule wins).
    pub fn fail_after(&self, qpn: u32, nth: u64) -> Option<u64> {
        self.fail
            .iter()
            .rev()
            .find(|r| r.qp.matches(qpn, nth))
            .map(|r| r.after)
    }

    /// The execution delay for a new QP, if a rule selects it.
    pub fn delay(&self, qpn: u32, nth: u64) -> Option<Duration> {
        self.delay
            .iter()
            .rev()
            .find(|r| r.qp.matches(qpn, nth))
            .map(|r| r.delay)
    }
}

/// Everything the provider shares across contexts.
pub(crate) struct Provider {
    pub devices: Vec<Device>,
    pub mrs: RwLock<MrTable>,
    /// Live QPs by number. A `BTreeMap` rather than a `HashMap`: its nodes are
    /// referenced by their start, so memcheck sees them as reachable at exit, whereas
    /// hashbrown's pointer into the middle of its table is reported as "possibly lost".
    qps: RwLock<BTreeMap<u32, QpEntry>>,
    /// Live XRC SRQs by number.
    srqs: RwLock<BTreeMap<u32, Weak<crate::srq::SrqCore>>>,
    pub engine: Engine,
    pub faults: Mutex<Faults>,
    contexts: Mutex<Vec<Weak<CtxCore>>>,
    /// RoCE GIDs of other processes' devices, looked up in the shared namespace: the
    /// device index (`None`: no process had it) and when it was looked up.
    remote_gids: RwLock<GidCache>,
    /// When the interfaces of RoCE ports were last looked at.
    watched: Mutex<Option<Instant>>,
    qps_created: AtomicU64,
    next_id: AtomicU32,
    /// XRC receive QPs opened across processes: calls waiting for answers, QPs other
    /// processes hold, our handles on theirs.
    pub xrc_open: xrc_open::XrcOpen,
}

/// How long a GID found in another process's exports is used without looking again.
const GID_CACHE_TTL: Duration = Duration::from_secs(1);
/// How long a GID no process had is not looked up again.
const GID_MISS_TTL: Duration = Duration::from_millis(100);
/// Entries of the GID cache (it is emptied when full).
const GID_CACHE_MAX: usize = 4096;
/// How often the service thread looks at the interfaces of RoCE ports.
pub(crate) const WATCH_EVERY: Duration = Duration::from_millis(100);

/// Other processes' RoCE GIDs as looked up: the device (`None`: no process had the GID)
/// and when.
type GidCache = BTreeMap<[u8; 16], (Option<usize>, Instant)>;

/// A QP of the table: the part the engine runs (what its lookups answer, with no
/// reference count more than before on the per-WQE path) and the object around it.
struct QpEntry {
    core: Weak<QpCore>,
    object: Weak<Qp>,
}

static PROVIDER: OnceLock<Provider> = OnceLock::new();
/// Device count requested by [`crate::set_device_count`] before initialisation.
static REQUESTED_DEVICES: Mutex<Option<usize>> = Mutex::new(None);

/// The provider, created on first use from the environment (and earlier API calls).
pub(crate) fn get() -> &'static Provider {
    PROVIDER.get_or_init(Provider::from_env)
}

/// Whether the provider exists yet.
pub(crate) fn is_initialised() -> bool {
    PROVIDER.get().is_some()
}

/// Records the device count to use at initialisation; false when it is too late.
pub(crate) fn request_devices(n: usize) -> bool {
    let mut req = REQUESTED_DEVICES.lock().unwrap_or_else(|e| e.into_inner());
    if is_initialised() {
        return false;
    }
    *req = Some(n);
    true
}

impl Provider {
    pub(crate) fn from_env() -> Provider {
        let requested = *REQUESTED_DEVICES.lock().unwrap_or_else(|e| e.into_inner());
        let count = requested
            .or_else(|| config::env_parsed(config::ENV_DEVICES, |s| s.trim().parse().ok()))
            .unwrap_or(config::DEFAULT_DEVICES)
            .min(config::MAX_DEVICES);
        let mut devices: Vec<Device> = (0..count).map(Device::new).collect();
        if let Some(binds) = config::env_parsed(config::ENV_NETDEV, crate::netdev::parse_bindings) {
            for (i, ifname) in binds {
                let Some(d) = devices.get_mut(i) else {
                    eprintln!(
                        "vqp-softverbs: {}: no device soft{i} (there are {count})",
                        config::ENV_NETDEV
                    );
                    continue;
                };
                let bound = Netdev::open(&ifname);
                if let Err(e) = &bound {
                    eprintln!("vqp-softverbs: soft{i} cannot be opened: {e}");
                }
                d.netdev = Some(bound);
            }
        }
        if let Some(down) = config::env_parsed(config::ENV_LINK_DOWN, config::parse_indices) {
            for i in down {
                if let Some(d) = devices.get(i) {
                    d.link_up.store(false, Ordering::Release);
                }
            }
        }
        if let Some(rates) = config::env_parsed(config::ENV_RATE, crate::link::parse_rates) {
            for (i, rate) in rates {
                if let Some(d) = devices.get(i) {
                    d.link.set_rate(rate);
                }
            }
        }
        let reorder =
            config::env_parsed(config::ENV_REORDER, Reorder::parse).unwrap_or(Reorder::Fifo);
        let progress =
            config::env_parsed(config::ENV_PROGRESS, Progress::parse).unwrap_or(Progress::Thread);
        let mut faults = Faults::default();
        if let Some(rules) = config::env_parsed(config::ENV_FAIL_QP, config::parse_rules) {
            faults.fail = rules
                .into_iter()
                .map(|(qp, after)| FailRule { qp, after })
                .collect();
        }
        if let Some(rules) = config::env_parsed(config::ENV_DELAY, config::parse_rules) {
            faults.delay = rules
                .into_iter()
                .map(|(qp, us)| DelayRule {
                    qp,
                    delay: Duration::from_micros(us),
                })
                .collect();
        }
        Provider {
            devices,
            mrs: RwLock::new(MrTable::default()),
            qps: RwLock::new(BTreeMap::new()),
            srqs: RwLock::new(BTreeMap::new()),
            engine: Engine::new(reorder, progress, Transport::default()),
            faults: Mutex::new(faults),
            contexts: Mutex::new(Vec::new()),
            remote_gids: RwLock::new(BTreeMap::new()),
            watched: Mutex::new(None),
            qps_created: AtomicU64::new(0),
            next_id: AtomicU32::new(1),
            xrc_open: xrc_open::XrcOpen::default(),
        }
    }

    /// The way to other processes (the engine's transport).
    #[inline]
    pub fn transport(&self) -> &Transport {
        self.engine.transport()
    }

    /// Remembers an opened context (for port events).
    pub fn register_context(&self, ctx: &Arc<CtxCore>) {
        let mut v = lock(&self.contexts);
        v.retain(|w| w.strong_count() > 0);
        v.push(Arc::downgrade(ctx));
    }

    /// Raises an asynchronous event on every open context of device `dev`.
    pub fn raise_on_device(&self, dev: usize, kind: u32, element: usize) {
        let v = lock(&self.contexts);
        for c in v.iter().filter_map(Weak::upgrade) {
            if c.dev == dev {
                c.raise(kind, element);
            }
        }
    }

    /// A fresh id for a PD, CQ or similar object.
    pub fn next_id(&self) -> u32 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// Allocates a QP number and the QP's creation rank (from 1). Numbers are
    /// machine-wide (the shared registry), never handed out twice: when none can be had
    /// (the table is full, or the namespace cannot be used) the error is the errno for
    /// `ibv_create_qp`.
    pub fn alloc_qpn(&'static self) -> Result<(u32, u64), i32> {
        let qpn = self.transport().alloc_qpn(self)?;
        let nth = self.qps_created.fetch_add(1, Ordering::Relaxed) + 1;
        Ok((qpn, nth))
    }

    /// Makes a QP findable by its number, in this process and by other processes.
    pub fn register_qp(&self, qp: &Arc<Qp>) {
        let entry = QpEntry {
            core: Arc::downgrade(qp.core()),
            object: Arc::downgrade(qp),
        };
        self.qps
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(qp.qpn, entry);
        self.transport().publish(qp.qpn, qp.dev);
    }

    /// Forgets a QP number (and frees it machine-wide).
    pub fn unregister_qp(&self, qpn: u32) {
        self.qps
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&qpn);
        self.transport().release(qpn);
    }

    /// The live QP `qpn` of device `dev`: the part the engine runs.
    pub fn find_qp(&self, dev: usize, qpn: u32) -> Option<Arc<QpCore>> {
        let qp = self
            .qps
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&qpn)?
            .core
            .upgrade()?;
        (qp.dev == dev).then_some(qp)
    }

    /// The live QP `qpn` of device `dev`: the object (for `ibv_open_qp`).
    pub fn find_qp_object(&self, dev: usize, qpn: u32) -> Option<Arc<Qp>> {
        let qp = self
            .qps
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&qpn)?
            .object
            .upgrade()?;
        (qp.dev == dev).then_some(qp)
    }

    /// Allocates an XRC SRQ number, from the QP numbers' machine-wide table (so that
    /// it names nothing else on the node; it does not count as a QP created).
    pub fn alloc_srqn(&'static self) -> Result<u32, i32> {
        self.transport().alloc_qpn(self)
    }

    /// Makes XRC SRQ `srqn` findable by its number (taken with [`Provider::alloc_qpn`]).
    pub fn register_srq(&self, srqn: u32, srq: &Arc<crate::srq::SrqCore>) {
        self.srqs
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(srqn, Arc::downgrade(srq));
        // Published machine-wide: an XRC receive QP of another process forwards the
        // requests that name it here (`engine::route::namespace::xrc`).
        self.transport().publish(srqn, srq.dev);
    }

    /// Forgets XRC SRQ number `srqn` (and frees it machine-wide).
    pub fn unregister_srq(&self, srqn: u32) {
        self.srqs
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&srqn);
        self.transport().release(srqn);
    }

    /// The live XRC SRQ `srqn` of this process.
    pub fn find_srq(&self, srqn: u32) -> Option<Arc<crate::srq::SrqCore>> {
        self.srqs
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&srqn)?
            .upgrade()
    }

    /// Every live QP (for fault rules applied after creation).
    pub fn all_qps(&self) -> Vec<Arc<QpCore>> {
        self.qps
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .filter_map(|e| e.core.upgrade())
            .collect()
    }

    /// What a polling thread does before it reads its CQ: runs the engine and serves
    /// the shared inbox (`Engine::poll_progress`), and, in a process that serves other
    /// machines, their messages too ([`Provider::serve_machines`]): a request that came
    /// over UCX is taken by the thread that waits for it, as UCX's own progress runs in
    /// the caller's thread, rather than by the machine thread, whose wake-up on a
    /// machine whose cores are all polling costs tens of microseconds and more.
    #[inline]
    pub(crate) fn poll_turn(&'static self) {
        self.engine.poll_progress(self);
        if self.transport().serves_machines() {
            let _ = self.serve_machines(true);
        }
    }

    /// One turn for other machines (`engine::route::serve_machine`; `polling`: by a
    /// polling thread): returns when to look again (`None`: nothing going on).
    #[cold]
    fn serve_machines(&'static self, polling: bool) -> Option<Duration> {
        crate::engine::route::serve_machine(
            self,
            |g| self.resolve(0, Some(g)).map(|d| d.index),
            polling,
        )
    }

    /// The device an address vector points at: by GID when `gid` is given (a GID of
    /// one of our ports, or of a RoCE port of another process of the namespace), else
    /// by LID (InfiniBand ports only: a RoCE port has no LID).
    pub fn resolve(&self, lid: u16, gid: Option<&[u8; 16]>) -> Option<&Device> {
        match gid {
            Some(g) => self
                .devices
                .iter()
                .find(|d| d.gids().contains(g))
                .or_else(|| self.devices.get(self.remote_gid(g)?)),
            None => {
                let i = usize::from(lid).checked_sub(1)?;
                self.devices.get(i).filter(|d| !d.is_roce())
            }
        }
    }

    /// The device index of another process's RoCE GID `g`. Answers are cached, a found
    /// device for [`GID_CACHE_TTL`], "none" for [`GID_MISS_TTL`] (a peer that starts
    /// later is found that much later), so that the per-WQE resolution of an address
    /// reads the namespace's files at most that often.
    fn remote_gid(&self, g: &[u8; 16]) -> Option<usize> {
        let now = Instant::now();
        let cached = self
            .remote_gids
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(g)
            .copied();
        if let Some((dev, at)) = cached {
            let ttl = if dev.is_some() {
                GID_CACHE_TTL
            } else {
                GID_MISS_TTL
            };
            if now.duration_since(at) < ttl {
                return dev;
            }
        }
        let found = self.transport().find_gid(g);
        let mut cache = self.remote_gids.write().unwrap_or_else(|e| e.into_inner());
        if cache.len() >= GID_CACHE_MAX {
            cache.clear();
        }
        cache.insert(*g, (found, now));
        found
    }

    /// Looks at the interfaces of RoCE ports (at most every [`WATCH_EVERY`]): a port
    /// whose interface went down raises `IBV_EVENT_PORT_ERR`, up again
    /// `IBV_EVENT_PORT_ACTIVE`. Called by the shared namespace's service thread.
    pub fn watch_netdevs(&self) {
        {
            let mut last = lock(&self.watched);
            let now = Instant::now();
            if last.is_some_and(|t| now.duration_since(t) < WATCH_EVERY) {
                return;
            }
            *last = Some(now);
        }
        let mut changed = false;
        for d in &self.devices {
            let Some(n) = d.roce() else { continue };
            if let Some(up) = n.refresh() {
                changed = true;
                if d.link_up.load(Ordering::Acquire) {
                    let kind = if up {
                        crate::cq::event::PORT_ACTIVE
                    } else {
                        d.note_down();
                        crate::cq::event::PORT_ERR
                    };
                    self.raise_on_device(d.index, kind, 1);
                }
            }
        }
        if changed {
            self.transport().export_links();
        }
    }

    /// Whether any port is a RoCE port with an interface to watch.
    pub fn has_netdevs(&self) -> bool {
        self.devices.iter().any(|d| d.roce().is_some())
    }

    /// Starts watching the interfaces of RoCE ports (the shared namespace's service
    /// thread does it), if there are any.
    pub fn start_watching(&'static self) {
        if self.has_netdevs() {
            // Before the namespace's service thread and the machine thread start.
            self.transport().load_ucx();
            self.transport().start(self);
            // The bound interfaces' addresses (their IPv4-mapped and IPv6 GIDs), where
            // other machines look this process up, each with its interface.
            let mut addrs: Vec<crate::transport::MachineAddr> = Vec::new();
            for d in self.devices.iter().filter(|d| d.is_roce()) {
                let Some(n) = d.roce() else {
                    continue;
                };
                for &ip in &n.addrs {
                    if !addrs.iter().any(|b| b.ip == ip && b.ifindex == n.ifindex) {
                        addrs.push(crate::transport::MachineAddr {
                            ip,
                            ifindex: n.ifindex,
                            ifname: n.name.clone(),
                        });
                    }
                }
            }
            self.transport().start_machine(self, &addrs);
        }
    }

    /// The device index an address vector points at.
    pub fn resolve_av(&self, ah: &vqp_sys::ibv_ah_attr) -> Option<usize> {
        let gid = (ah.is_global != 0).then(|| *vqp_sys::Gid::from_sys(&ah.grh.dgid).as_bytes());
        self.resolve(ah.dlid, gid.as_ref()).map(|d| d.index)
    }

    /// Applies a QP selector to the QPs that exist now.
    pub fn selected_qps(&self, sel: QpSelector) -> Vec<Arc<QpCore>> {
        self.all_qps()
            .into_iter()
            .filter(|q| sel.matches(q.qpn, q.nth))
            .collect()
    }
}

/// The engine asks the provider for its devices, keys and objects through this.
impl Tables for Provider {
    #[inline]
    fn engine(&self) -> &Engine {
        &self.engine
    }

    #[inline]
    fn devices(&self) -> &[Device] {
        &self.devices
    }

    #[inline]
    fn mrs(&self) -> &RwLock<MrTable> {
        &self.mrs
    }

    #[inline]
    fn find_qp(&self, dev: usize, qpn: u32) -> Option<Arc<QpCore>> {
        Provider::find_qp(self, dev, qpn)
    }

    #[inline]
    fn find_srq(&self, srqn: u32) -> Option<Arc<SrqCore>> {
        Provider::find_srq(self, srqn)
    }

    #[inline]
    fn resolve_av(&self, ah: &vqp_sys::ibv_ah_attr) -> Option<usize> {
        Provider::resolve_av(self, ah)
    }

    fn on_object_record(
        &'static self,
        sh: &'static crate::shared::Shared,
        rec: &crate::shared::inbox::Record,
        payload: &[u8],
    ) {
        use crate::shared::inbox::Kind;
        match rec.kind {
            Kind::XrcCall => xrc_open::on_call(self, sh, rec, payload),
            Kind::XrcReply => self.xrc_open.on_reply(rec, payload),
            Kind::XrcEvent => self.xrc_open.on_event(rec),
            _ => {}
        }
    }
}

/// The shared namespace hands this process's inbox to the provider: requests and
/// answers run on its QPs through the engine's cross-process side.
impl crate::shared::Endpoint for Provider {
    fn devices(&self) -> usize {
        self.devices.len()
    }

    fn links_down(&self) -> u64 {
        self.devices
            .iter()
            .take(64)
            .enumerate()
            .filter(|(_, d)| !d.is_up())
            .fold(0u64, |m, (i, _)| m | 1 << i)
    }

    fn each_region(&self, f: &mut dyn FnMut(u32, &crate::region::MrInfo)) {
        let mrs = self.mrs.read().unwrap_or_else(|e| e.into_inner());
        for (key, info) in mrs.live() {
            f(key, &info);
        }
    }

    fn deliver(
        &'static self,
        sh: &'static crate::shared::Shared,
        rec: crate::shared::inbox::Record,
        payload: &[u8],
        ack: &mut Option<crate::shared::Ack>,
    ) {
        crate::engine::route::on_record(self, sh, rec, payload, ack);
    }

    fn check_deadlines(&self, sh: &crate::shared::Shared) -> bool {
        crate::engine::route::check_deadlines(self, sh)
    }

    fn activity(&self) -> u64 {
        self.engine.activity()
    }

    fn polling_since(&self, last: u64) -> bool {
        self.engine.polling_since(last)
    }

    fn idle_grace(&self) -> Duration {
        crate::engine::IDLE_GRACE
    }

    fn each_gid(&self, f: &mut dyn FnMut(usize, &[u8; 16])) {
        for d in self.devices.iter().filter(|d| d.is_roce()) {
            for g in d.gids() {
                f(d.index, g);
            }
        }
    }

    fn watch(&self) -> Option<Duration> {
        self.has_netdevs().then(|| {
            self.watch_netdevs();
            WATCH_EVERY
        })
    }

    fn machine_turn(&'static self, last_poll: &mut u64) -> bool {
        let polls = self.engine.activity();
        let polling = self.engine.polling_since(*last_poll);
        *last_poll = polls;
        if polling && self.transport().serves_machines() {
            // A thread of ours polls, and serves other machines before each look at
            // its CQ (`poll_turn`): a wake-up of this thread would only take a core
            // from it.
            return self.transport().machine_nap(crate::engine::IDLE_GRACE);
        }
        let next = self.serve_machines(false);
        if next == Some(Duration::ZERO) {
            return true;
        }
        self.transport()
            .machine_sleep(next.map_or(WATCH_EVERY, |t| t.min(WATCH_EVERY)))
    }
}
