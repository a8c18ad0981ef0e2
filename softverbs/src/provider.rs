//! The process-wide provider: devices, the memory key table, the QP registry, the
//! progress engine and the fault configuration. Created on first use.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock, Weak};
use std::time::Duration;

use crate::config::{self, DelayRule, FailRule, Progress, QpSelector, Reorder};
use crate::cq::CtxCore;
use crate::engine::Engine;
use crate::mem::MrTable;
use crate::os::lock;
use crate::qp::QpCore;

/// One software device: `soft<index>`, one port.
#[derive(Debug)]
pub(crate) struct Device {
    /// Position in the device list.
    pub index: usize,
    /// `soft<index>`.
    pub name: String,
    /// Node GUID (host order).
    pub guid: u64,
    /// The port's LID (`index + 1`).
    pub lid: u16,
    /// The port's only GID (index 0): the link-local prefix and the GUID.
    pub gid: [u8; 16],
    /// Port state: active or down.
    pub link_up: AtomicBool,
    /// The port's rate (see `link`).
    pub link: crate::link::Link,
}

impl Device {
    pub(crate) fn new(index: usize) -> Device {
        let guid = 0x0200_5eff_fe00_0000u64 | index as u64;
        let mut gid = [0u8; 16];
        gid[0] = 0xfe;
        gid[1] = 0x80;
        gid[8..].copy_from_slice(&guid.to_be_bytes());
        Device {
            index,
            name: format!("soft{index}"),
            guid,
            lid: (index + 1) as u16,
            gid,
            link_up: AtomicBool::new(true),
            link: crate::link::Link::default(),
        }
    }

    /// Whether the port is active.
    pub fn is_up(&self) -> bool {
        self.link_up.load(Ordering::Acquire)
    }
}

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
    qps: RwLock<BTreeMap<u32, Weak<QpCore>>>,
    /// Live XRC SRQs by number.
    srqs: RwLock<BTreeMap<u32, Weak<crate::srq::SrqCore>>>,
    pub engine: Engine,
    pub faults: Mutex<Faults>,
    contexts: Mutex<Vec<Weak<CtxCore>>>,
    qps_created: AtomicU64,
    next_id: AtomicU32,
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
        let devices: Vec<Device> = (0..count).map(Device::new).collect();
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
            engine: Engine::new(reorder, progress),
            faults: Mutex::new(faults),
            contexts: Mutex::new(Vec::new()),
            qps_created: AtomicU64::new(0),
            next_id: AtomicU32::new(1),
        }
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
        let qpn = crate::shared::alloc_qpn(self)?;
        let nth = self.qps_created.fetch_add(1, Ordering::Relaxed) + 1;
        Ok((qpn, nth))
    }

    /// Makes a QP findable by its number, in this process and by other processes.
    pub fn register_qp(&self, qp: &Arc<QpCore>) {
        self.qps
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(qp.qpn, Arc::downgrade(qp));
        crate::shared::publish(qp.qpn, qp.dev);
    }

    /// Forgets a QP number (and frees it machine-wide).
    pub fn unregister_qp(&self, qpn: u32) {
        self.qps
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&qpn);
        crate::shared::release(qpn);
    }

    /// The live QP `qpn` of device `dev`.
    pub fn find_qp(&self, dev: usize, qpn: u32) -> Option<Arc<QpCore>> {
        let qp = self
            .qps
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&qpn)?
            .upgrade()?;
        (qp.dev == dev).then_some(qp)
    }

    /// Allocates an XRC SRQ number, from the QP numbers' machine-wide table (so that
    /// it names nothing else on the node; it does not count as a QP created).
    pub fn alloc_srqn(&'static self) -> Result<u32, i32> {
        crate::shared::alloc_qpn(self)
    }

    /// Makes XRC SRQ `srqn` findable by its number (taken with [`Provider::alloc_qpn`]).
    pub fn register_srq(&self, srqn: u32, srq: &Arc<crate::srq::SrqCore>) {
        self.srqs
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(srqn, Arc::downgrade(srq));
    }

    /// Forgets XRC SRQ number `srqn` (and frees it machine-wide).
    pub fn unregister_srq(&self, srqn: u32) {
        self.srqs
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&srqn);
        crate::shared::release(srqn);
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
            .filter_map(Weak::upgrade)
            .collect()
    }

    /// The device an address vector points at: by GID when `gid` is given, else by LID.
    pub fn resolve(&self, lid: u16, gid: Option<&[u8; 16]>) -> Option<&Device> {
        match gid {
            Some(g) => self.devices.iter().find(|d| &d.gid == g),
            None => {
                let i = usize::from(lid).checked_sub(1)?;
                self.devices.get(i)
            }
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

    fn each_region(&self, f: &mut dyn FnMut(u32, &crate::mem::MrInfo)) {
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
        crate::engine::remote::handle(self, sh, rec, payload, ack);
    }

    fn check_deadlines(&self, sh: &crate::shared::Shared) -> bool {
        crate::engine::remote::check_deadlines(self, sh)
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
}
