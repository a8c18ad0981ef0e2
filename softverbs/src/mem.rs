//! Registered memory: the key table, checked [`Span`]s and the copies between them.
//!
//! This is one of the two places that touch raw memory (the other is the `extern "C"`
//! surface in [`crate::abi`]). Everything else reaches application memory only through
//! a [`Span`], and a `Span` can only be made by [`MrTable::span`] (an lkey's region) or
//! [`MrTable::remote_span`] (an rkey's region or memory window), which check the key,
//! the device, the protection domain, the bounds and the access rights against a live
//! registration while the caller holds the table's read lock (so the region cannot be
//! deregistered during the copy).
//!
//! The one trust assumption is libibverbs' own: memory stays valid (mapped, readable and
//! writable) for as long as it is registered — except an on-demand region's, whose
//! ranges are checked mapped when a span is made and are then copied only through
//! `process_vm_readv` / `writev` on this process, which fail rather than fault.
//! Concurrent access by the application to memory a WQE is moving is a data race in
//! the application, as it is with a NIC; the copies use raw pointers only, never
//! references, so no Rust aliasing rule is broken on our side.

use core::marker::PhantomData;
use std::sync::atomic::{AtomicU64, Ordering};

/// A registered memory region as the table keeps it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct MrInfo {
    /// Start address.
    pub addr: u64,
    /// Length in bytes.
    pub len: u64,
    /// `IBV_ACCESS_*` bits.
    pub access: u32,
    /// Device index the region was registered on.
    pub dev: usize,
    /// Protection domain id.
    pub pd: u32,
    /// A type 2 memory window's QP number: only requests arriving at that QP may use
    /// its rkey (IBA Vol. 1 §10.6.7.2, type 2B windows). 0 for a region or a type 1
    /// window, which any QP of the PD may use.
    pub qpn: u32,
}

impl MrInfo {
    /// Whether the range `[addr, addr + len)` lies inside the region.
    fn contains(&self, addr: u64, len: u64) -> bool {
        match addr.checked_add(len) {
            Some(end) => addr >= self.addr && end <= self.addr.saturating_add(self.len),
            None => false,
        }
    }

    /// Whether the region is on-demand paging (`IBV_ACCESS_ON_DEMAND`): its pages
    /// need not be mapped while it is registered.
    pub(crate) fn on_demand(&self) -> bool {
        self.access & vqp_sys::IBV_ACCESS_ON_DEMAND != 0
    }
}

/// Why a key check failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum KeyError {
    /// No live region has this key on this device (or a window's key is used as an
    /// lkey, or a type 2 window's through a QP it is not bound to).
    BadKey,
    /// The key is of another protection domain.
    WrongPd,
    /// The range is not inside the region (or overflows).
    Bounds,
    /// The region was not registered with the access needed.
    Access,
    /// The range of an on-demand region is not mapped in the process now.
    NotMapped,
}

/// Why a memory window could not be bound (the work request completes with
/// `IBV_WC_MW_BIND_ERR`). The rules are the specification's (IBA Vol. 1 §10.6.7.2,
/// the compliance statements named on each variant), as the kernel's software RoCE
/// provider (`rdma_rxe`, `rxe_check_bind_mw`) checks them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BindError {
    /// No window has this handle, or the work request names it by a key it does not
    /// have now, or the new key names another window.
    NoWindow,
    /// The window, QP and region are not all of one protection domain (C10-72).
    WrongPd,
    /// A type 2 window is bound already: it must be invalidated first (o10-37.2.30).
    Busy,
    /// A type 2 window bound to no region or to zero bytes (o10-37.2.40).
    Empty,
    /// The region is not live, is a window, or is of another device.
    BadRegion,
    /// The region was not registered with `IBV_ACCESS_MW_BIND`.
    NotBindable,
    /// Remote write or atomic access through a region without local write (C10-74).
    Access,
    /// The window's range is not inside the region (C10-75).
    Bounds,
    /// Zero-based windows are not supported (o10-36.2.2 for type 1).
    ZeroBased,
}

/// A memory window: its type and PD, and what it is bound to now.
struct Window {
    /// `IBV_MW_TYPE_1` or `IBV_MW_TYPE_2`.
    ty: u32,
    pd: u32,
    dev: usize,
    /// Its binding. A mutex rather than the table's write lock: the engine binds and
    /// invalidates windows in the order of a QP's work requests while it holds the
    /// table's read lock.
    bound: std::sync::Mutex<Option<Binding>>,
}

/// A window's binding.
#[derive(Clone, Copy, Debug)]
struct Binding {
    /// The rkey it answers to.
    key: u32,
    /// The range and rights it grants (and, for type 2, its QP).
    info: MrInfo,
    /// The key of the region it lies in (deregistering that region unbinds it).
    parent: u32,
}

/// A window's change of binding: the key and region it answers to now (`None`:
/// unbound), and the key it answered to before, if any.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Rebound {
    pub new: Option<(u32, MrInfo)>,
    pub old: Option<u32>,
}

/// What a bind work request asks for.
#[derive(Clone, Copy, Debug)]
pub(crate) struct BindRequest {
    /// The window's handle (its key's slot part, `key >> 8`).
    pub handle: u32,
    /// The key the request names the window by: its key now (type 1, as
    /// `ibv_bind_mw` passes it) or any key of the window (type 2).
    pub new_key: u32,
    /// The region's lkey; `None` for an unbind (a type 1 window, zero length).
    pub mr: Option<u32>,
    pub addr: u64,
    pub len: u64,
    /// `IBV_ACCESS_REMOTE_*` (and `IBV_ACCESS_ZERO_BASED`) bits.
    pub access: u32,
    /// The binding QP's device, PD and number.
    pub dev: usize,
    pub pd: u32,
    pub qpn: u32,
}

/// The key table of every registered region in the process. A key is
/// `(slot + 1) << 8 | generation`: lookups are an index, and a stale key (deregistered,
/// slot reused) fails by its generation byte. `lkey` and `rkey` are the same value.
///
/// Memory windows take slots of the same table, so that an rkey names a region or a
/// window and the responder's checks (here and across processes, `shared::exports`)
/// are the same for both. A window's slot holds no region (`info` is `None`, so its
/// key never passes as an lkey); its binding carries the key and range it grants.
#[derive(Default)]
pub(crate) struct MrTable {
    slots: Vec<Slot>,
    free: Vec<u32>,
    /// Slots holding windows (to unbind those of a region being deregistered).
    windows: Vec<u32>,
}

struct Slot {
    gen: u8,
    info: Option<MrInfo>,
    /// Added (wrapping) to an address of the region's `[addr, addr + len)` to find
    /// its byte in the process: 0 for an ordinary region; for a zero-based one
    /// (`IBV_ACCESS_ZERO_BASED`: device memory) the host address of its first byte.
    shift: u64,
    window: Option<Box<Window>>,
}

/// The largest slot index a key can carry (24 bits).
const MAX_SLOTS: usize = (1 << 24) - 1;

impl MrTable {
    /// Takes a free slot and gives it a new generation; `None` when the table is full.
    fn take_slot(&mut self) -> Option<usize> {
        let slot = match self.free.pop() {
            Some(i) => i as usize,
            None => {
                if self.slots.len() >= MAX_SLOTS {
                    return None;
                }
                self.slots.push(Slot {
                    gen: 0,
                    info: None,
                    shift: 0,
                    window: None,
                });
                self.slots.len() - 1
            }
        };
        let s = &mut self.slots[slot];
        s.gen = s.gen.wrapping_add(1);
        Some(slot)
    }

    fn key_of(&self, slot: usize) -> u32 {
        (((slot + 1) as u32) << 8) | u32::from(self.slots[slot].gen)
    }

    /// Registers a region; `None` when the table is full.
    pub(crate) fn register(&mut self, info: MrInfo) -> Option<u32> {
        self.register_at(info, info.addr)
    }

    /// Registers a region whose addresses `[info.addr, info.addr + info.len)` name the
    /// bytes from `host` on (a zero-based region: `info.addr` 0). Such a region is not
    /// among [`MrTable::live`]'s, which are exported for other processes to copy into
    /// directly (its addresses are not the process's): their requests to it come through
    /// the responder. `None` when the table is full.
    pub(crate) fn register_at(&mut self, info: MrInfo, host: u64) -> Option<u32> {
        let slot = self.take_slot()?;
        let s = &mut self.slots[slot];
        s.info = Some(info);
        s.shift = host.wrapping_sub(info.addr);
        Some(self.key_of(slot))
    }

    /// Removes a region; false when the key is not live.
    pub(crate) fn deregister(&mut self, key: u32) -> bool {
        let Some(i) = self.index(key) else {
            return false;
        };
        self.slots[i].info = None;
        self.free.push(i as u32);
        true
    }

    /// Unbinds every window bound inside the region of `key` (it is being
    /// deregistered or re-registered: the windows' memory is no longer the region's),
    /// and returns the keys they answered to, for the caller to withdraw from other
    /// processes. A NIC fails accesses through such windows, as the region's
    /// translation is gone.
    pub(crate) fn unbind_windows_of(&self, key: u32) -> Vec<u32> {
        self.unbind_where(|b| b.parent == key)
    }

    /// Unbinds every type 2 window bound through QP `qpn` of device `dev` (the QP is
    /// being destroyed: a type 2B window answers only through its QP, whose number
    /// another QP may take next), and returns the keys they answered to.
    pub(crate) fn unbind_windows_of_qp(&self, dev: usize, qpn: u32) -> Vec<u32> {
        self.unbind_where(|b| b.info.qpn == qpn && b.info.dev == dev)
    }

    fn unbind_where(&self, hit: impl Fn(&Binding) -> bool) -> Vec<u32> {
        let mut keys = Vec::new();
        for &w in &self.windows {
            let Some(win) = self.slots[w as usize].window.as_ref() else {
                continue;
            };
            let mut b = win.bound.lock().unwrap_or_else(|e| e.into_inner());
            if b.as_ref().is_some_and(&hit) {
                keys.extend(b.take().map(|b| b.key));
            }
        }
        keys
    }

    /// Allocates a memory window (`ibv_alloc_mw`) of type `ty` in PD `pd`: a slot
    /// whose key names the window but grants nothing until it is bound. Returns its
    /// key; `None` when the table is full.
    pub(crate) fn alloc_window(&mut self, ty: u32, dev: usize, pd: u32) -> Option<u32> {
        let slot = self.take_slot()?;
        self.slots[slot].window = Some(Box::new(Window {
            ty,
            pd,
            dev,
            bound: std::sync::Mutex::new(None),
        }));
        self.windows.push(slot as u32);
        Some(self.key_of(slot))
    }

    /// Frees the window of handle `handle` (`ibv_dealloc_mw`); `Err(())` when no window
    /// has it, else the key it was bound under, if any (for the caller to withdraw).
    #[allow(clippy::result_unit_err)]
    pub(crate) fn free_window(&mut self, handle: u32) -> Result<Option<u32>, ()> {
        let slot = handle.checked_sub(1).ok_or(())? as usize;
        let s = self.slots.get_mut(slot).ok_or(())?;
        let win = s.window.take().ok_or(())?;
        let bound = win.bound.into_inner().unwrap_or_else(|e| e.into_inner());
        self.windows.retain(|&w| w as usize != slot);
        self.free.push(slot as u32);
        Ok(bound.map(|b| b.key))
    }

    /// Whether `key`'s slot holds a memory window.
    pub(crate) fn is_window(&self, key: u32) -> bool {
        self.window(key >> 8).is_some()
    }

    fn window(&self, handle: u32) -> Option<&Window> {
        let slot = handle.checked_sub(1)? as usize;
        self.slots.get(slot)?.window.as_deref()
    }

    /// Binds a window as a bind work request asks (`IBV_WR_BIND_MW`, or
    /// `ibv_bind_mw` for type 1); returns what changed, for the caller to publish to
    /// other processes.
    ///
    /// # Errors
    /// [`BindError`], the window unchanged.
    pub(crate) fn bind_window(&self, r: &BindRequest) -> Result<Rebound, BindError> {
        let win = self.window(r.handle).ok_or(BindError::NoWindow)?;
        if r.new_key >> 8 != r.handle || win.dev != r.dev {
            return Err(BindError::NoWindow);
        }
        let mut b = win.bound.lock().unwrap_or_else(|e| e.into_inner());
        let type2 = win.ty == vqp_sys::IBV_MW_TYPE_2;
        if type2 && b.is_some() {
            return Err(BindError::Busy);
        }
        if win.pd != r.pd {
            return Err(BindError::WrongPd);
        }
        if r.access & vqp_sys::IBV_ACCESS_ZERO_BASED != 0 {
            return Err(BindError::ZeroBased);
        }
        let Some(lkey) = r.mr else {
            if type2 {
                return Err(BindError::Empty);
            }
            return Ok(Rebound {
                new: None,
                old: b.take().map(|b| b.key),
            });
        };
        if type2 && r.len == 0 {
            return Err(BindError::Empty);
        }
        let mr = self.get(lkey).ok_or(BindError::BadRegion)?;
        if mr.dev != r.dev {
            return Err(BindError::BadRegion);
        }
        if mr.pd != r.pd {
            return Err(BindError::WrongPd);
        }
        if mr.access & vqp_sys::IBV_ACCESS_MW_BIND == 0 {
            return Err(BindError::NotBindable);
        }
        let remote = vqp_sys::IBV_ACCESS_REMOTE_WRITE | vqp_sys::IBV_ACCESS_REMOTE_ATOMIC;
        if r.access & remote != 0 && mr.access & vqp_sys::IBV_ACCESS_LOCAL_WRITE == 0 {
            return Err(BindError::Access);
        }
        if !mr.contains(r.addr, r.len) {
            return Err(BindError::Bounds);
        }
        let info = MrInfo {
            addr: r.addr,
            len: r.len,
            // The window's rights, and whether its memory pages on demand.
            access: (r.access & WINDOW_ACCESS) | (mr.access & vqp_sys::IBV_ACCESS_ON_DEMAND),
            dev: r.dev,
            pd: r.pd,
            qpn: if type2 { r.qpn } else { 0 },
        };
        let old = b.replace(Binding {
            key: r.new_key,
            info,
            parent: lkey,
        });
        Ok(Rebound {
            new: Some((r.new_key, info)),
            old: old.map(|b| b.key),
        })
    }

    /// Invalidates the type 2 window bound under `key` (`IBV_WR_LOCAL_INV` on a QP of
    /// PD `pd`, `qpn: None`; or `IBV_WR_SEND_WITH_INV` arriving at QP `qpn`, which
    /// must be the window's). Type 1 windows cannot be invalidated (o10-37.2.26).
    ///
    /// # Errors
    /// `BadKey` when no type 2 window is bound under `key` (or it is bound through
    /// another QP), `WrongPd` for a window of another PD.
    pub(crate) fn invalidate(&self, key: u32, pd: u32, qpn: Option<u32>) -> Result<(), KeyError> {
        let win = self.window(key >> 8).ok_or(KeyError::BadKey)?;
        if win.ty != vqp_sys::IBV_MW_TYPE_2 {
            return Err(KeyError::BadKey);
        }
        let mut b = win.bound.lock().unwrap_or_else(|e| e.into_inner());
        let bound = b.filter(|b| b.key == key).ok_or(KeyError::BadKey)?;
        if win.pd != pd {
            return Err(KeyError::WrongPd);
        }
        if qpn.is_some_and(|q| q != bound.info.qpn) {
            return Err(KeyError::BadKey);
        }
        *b = None;
        Ok(())
    }

    /// Replaces the region of a live key, which stays the same (`ibv_rereg_mr`); false
    /// when the key is not live.
    pub(crate) fn update(&mut self, key: u32, info: MrInfo) -> bool {
        let Some(i) = self.index(key) else {
            return false;
        };
        self.slots[i].info = Some(info);
        true
    }

    fn index(&self, key: u32) -> Option<usize> {
        let slot = (key >> 8).checked_sub(1)? as usize;
        let s = self.slots.get(slot)?;
        (s.gen == key as u8 && s.info.is_some()).then_some(slot)
    }

    /// The live region of `key`.
    pub(crate) fn get(&self, key: u32) -> Option<&MrInfo> {
        self.index(key).and_then(|i| self.slots[i].info.as_ref())
    }

    /// The live region of `key` and its shift (see [`MrTable::register_at`]).
    fn region(&self, key: u32) -> Option<(&MrInfo, u64)> {
        let s = &self.slots[self.index(key)?];
        Some((s.info.as_ref()?, s.shift))
    }

    /// Every live region, and every bound window, with its key; not the zero-based
    /// regions ([`MrTable::register_at`]).
    pub(crate) fn live(&self) -> Vec<(u32, MrInfo)> {
        let mut out = Vec::new();
        for (i, s) in self.slots.iter().enumerate() {
            if let Some(info) = s.info.filter(|_| s.shift == 0) {
                out.push(((((i + 1) as u32) << 8) | u32::from(s.gen), info));
            }
            if let Some(w) = &s.window {
                let b = w.bound.lock().unwrap_or_else(|e| e.into_inner());
                out.extend(b.map(|b| (b.key, b.info)));
            }
        }
        out
    }

    /// Number of live regions.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.slots.iter().filter(|s| s.info.is_some()).count()
    }

    /// Checks `[addr, addr + len)` against the region of lkey `key` and returns a span
    /// over it. `need` are the `IBV_ACCESS_*` bits the operation needs (0 for a local
    /// read). A window's key is no lkey (IBA Vol. 1 §10.6.7: windows grant remote
    /// access only): `BadKey`.
    pub(crate) fn span(
        &self,
        key: u32,
        dev: usize,
        pd: u32,
        addr: u64,
        len: u64,
        need: u32,
    ) -> Result<Span<'_>, KeyError> {
        let (mr, shift) = self.region(key).ok_or(KeyError::BadKey)?;
        check(mr, shift, dev, pd, addr, len, need)
    }

    /// Checks a remote request's `[addr, addr + len)` against rkey `key`, which names
    /// a region or a bound window, at responder QP `qpn` (a type 2 window answers only
    /// through its own QP); as [`MrTable::span`] otherwise.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn remote_span(
        &self,
        key: u32,
        dev: usize,
        pd: u32,
        qpn: u32,
        addr: u64,
        len: u64,
        need: u32,
    ) -> Result<Span<'_>, KeyError> {
        if let Some((mr, shift)) = self.region(key) {
            return check(mr, shift, dev, pd, addr, len, need);
        }
        let win = self.window(key >> 8).ok_or(KeyError::BadKey)?;
        let bound = *win.bound.lock().unwrap_or_else(|e| e.into_inner());
        let b = bound.filter(|b| b.key == key).ok_or(KeyError::BadKey)?;
        if b.info.qpn != 0 && b.info.qpn != qpn {
            return Err(KeyError::BadKey);
        }
        check(&b.info, 0, dev, pd, addr, len, need)
    }
}

/// Access bits a window grants.
const WINDOW_ACCESS: u32 = vqp_sys::IBV_ACCESS_REMOTE_WRITE
    | vqp_sys::IBV_ACCESS_REMOTE_READ
    | vqp_sys::IBV_ACCESS_REMOTE_ATOMIC;

/// The checks of a key's region (or window) `mr` against an access; `shift` takes the
/// region's addresses to the process's (0 but for a zero-based region).
///
/// A window's span is valid as long as its region is registered: the window lies
/// inside the region (checked when it was bound), and the region cannot be
/// deregistered while the table's read lock is held (deregistration unbinds it
/// first). An on-demand region's range must be mapped in the process now
/// ([`mapped`]): a NIC faults the pages in, or fails the access when there is
/// nothing to fault in; its span is marked, so that the copies reach it only through
/// [`guarded_copy`].
fn check<'t>(
    mr: &MrInfo,
    shift: u64,
    dev: usize,
    pd: u32,
    addr: u64,
    len: u64,
    need: u32,
) -> Result<Span<'t>, KeyError> {
    if mr.dev != dev {
        return Err(KeyError::BadKey);
    }
    if mr.pd != pd {
        return Err(KeyError::WrongPd);
    }
    if !mr.contains(addr, len) {
        return Err(KeyError::Bounds);
    }
    if mr.access & need != need {
        return Err(KeyError::Access);
    }
    let addr = addr.wrapping_add(shift);
    let odp = mr.on_demand();
    if odp && !mapped(addr, len) {
        return Err(KeyError::NotMapped);
    }
    Ok(Span {
        addr,
        len,
        odp,
        _table: PhantomData,
    })
}

/// Whether every page of `[addr, addr + len)` is mapped in this process now
/// (`mincore(2)` fails with `ENOMEM` on a range that is not). Whether a mapping is
/// resident does not matter (an access faults it in), nor whether it grants the
/// access: the copies find that out ([`guarded_copy`]); this check tells an unmapped
/// range before anything is moved.
pub(crate) fn mapped(addr: u64, len: u64) -> bool {
    if len == 0 {
        return true;
    }
    /// Pages asked about per call (the answer vector's size).
    const CHUNK: u64 = 4096;
    // SAFETY: `sysconf` reads a constant of the system.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    let page_size = u64::try_from(size)
        .ok()
        .filter(|p| p.is_power_of_two())
        .unwrap_or(4096);
    let Some(end) = addr.checked_add(len) else {
        return false;
    };
    let mut page = addr & !(page_size - 1);
    let mut vec = [0u8; CHUNK as usize];
    while page < end {
        let bytes = (end - page).min(CHUNK * page_size);
        // SAFETY: `mincore` only reads the page tables of the range (any range is
        // allowed; unmapped ones fail) and writes one byte per page into `vec`, which
        // holds `CHUNK` bytes for at most `CHUNK` pages; `page` is page-aligned.
        let rc = unsafe {
            libc::mincore(
                page as usize as *mut libc::c_void,
                bytes as usize,
                vec.as_mut_ptr(),
            )
        };
        if rc != 0 {
            return false;
        }
        page += bytes;
    }
    true
}

/// A checked range of registered memory, valid while the table's read lock that made it
/// is held (the lifetime).
///
/// Invariant: `[addr, addr + len)` lies inside a region registered when the span was
/// made, with the access the operation needed, and the region stays registered for
/// `'t` (deregistration needs the write lock).
///
/// A span of an on-demand region (`odp`) was mapped when it was made; the copies reach
/// it only through `process_vm_readv` / `writev` on this process ([`guarded_copy`]),
/// which fail instead of faulting where it is no longer (or not in the needed way)
/// accessible.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Span<'t> {
    addr: u64,
    len: u64,
    odp: bool,
    _table: PhantomData<&'t MrTable>,
}

impl Span<'static> {
    /// An empty span (fills unused slots of fixed arrays; copies skip it).
    pub(crate) const fn empty() -> Span<'static> {
        Span {
            addr: 0,
            len: 0,
            odp: false,
            _table: PhantomData,
        }
    }
}

impl Span<'_> {
    fn ptr(&self) -> *mut u8 {
        self.addr as usize as *mut u8
    }

    /// The start address and length (for a copy by another process's hand).
    pub(crate) fn range(&self) -> (u64, u64) {
        (self.addr, self.len)
    }
}

/// Splits the span list `spans` after `n` bytes: the first `n` bytes' spans are written
/// to `head`, the rest to `tail` (a span straddling the cut is split, both parts lying
/// inside it, so both keep the invariant); returns how many of each. Entries that do
/// not fit the output arrays are left out.
pub(crate) fn split_at<'t>(
    spans: &[Span<'t>],
    n: u64,
    head: &mut [Span<'t>],
    tail: &mut [Span<'t>],
) -> (usize, usize) {
    let (mut nh, mut nt) = (0, 0);
    let mut left = n;
    let put = |out: &mut [Span<'t>], k: &mut usize, s: Span<'t>| {
        if s.len > 0 && *k < out.len() {
            out[*k] = s;
            *k += 1;
        }
    };
    for s in spans {
        let h = s.len.min(left);
        left -= h;
        put(head, &mut nh, Span { len: h, ..*s });
        put(
            tail,
            &mut nt,
            Span {
                addr: s.addr + h,
                len: s.len - h,
                odp: s.odp,
                _table: PhantomData,
            },
        );
    }
    (nh, nt)
}

/// Total bytes of a span list.
pub(crate) fn total(spans: &[Span<'_>]) -> u64 {
    spans.iter().map(|s| s.len).sum()
}

/// A copy touching on-demand memory found it inaccessible (unmapped, or mapped
/// without the access) on its source side or its destination side.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fault {
    Src,
    Dst,
}

/// Copies `n` bytes from address `s` to address `d`, where the source (`s_odp`) or the
/// destination (`d_odp`) lies in an on-demand region: through a bounce buffer, the
/// on-demand side read or written with `process_vm_readv` / `writev` on this process,
/// which fail with `EFAULT` where the memory is not accessible instead of faulting.
/// Overlapping ranges (a loopback copy) are copied in the order that keeps them right.
/// Where the system refuses `process_vm_*` on this process (a seccomp filter), the
/// range, found mapped when its span was made, is copied directly.
fn guarded_copy(d: u64, s: u64, n: u64, s_odp: bool, d_odp: bool) -> Result<(), Fault> {
    use crate::shared::sys::{process_copy, CopyError};
    const PIECE: u64 = 4096;
    let mut bounce = [0u8; PIECE as usize];
    let b = bounce.as_mut_ptr() as u64;
    let me = std::process::id();
    let backward = d > s && d < s.saturating_add(n);
    let mut done = 0u64;
    while done < n {
        let k = (n - done).min(PIECE);
        let off = if backward { n - done - k } else { done };
        let read = s_odp
            && match process_copy(me, &[(b, k)], &[(s + off, k)], true) {
                Ok(()) => true,
                Err(CopyError::Denied) => false,
                Err(_) => return Err(Fault::Src),
            };
        if !read {
            // SAFETY: `[s + off, s + off + k)` lies in a span of registered memory
            // (pinned, or on-demand and mapped when checked); `bounce` holds `k` bytes
            // and is the provider's own.
            unsafe {
                core::ptr::copy_nonoverlapping(
                    (s + off) as usize as *const u8,
                    bounce.as_mut_ptr(),
                    k as usize,
                )
            }
        }
        let written = d_odp
            && match process_copy(me, &[(b, k)], &[(d + off, k)], false) {
                Ok(()) => true,
                Err(CopyError::Denied) => false,
                Err(_) => return Err(Fault::Dst),
            };
        if !written {
            // SAFETY: as above, for the destination span.
            unsafe {
                core::ptr::copy_nonoverlapping(
                    bounce.as_ptr(),
                    (d + off) as usize as *mut u8,
                    k as usize,
                )
            }
        }
        done += k;
    }
    Ok(())
}

/// Copies from the `src` spans, in order, into the `dst` spans, in order, until either
/// list is exhausted; returns the bytes copied. Overlap between source and destination
/// (a loopback copy inside one region) is allowed.
///
/// # Errors
/// [`Fault`] when on-demand memory on either side is not accessible; the bytes before
/// it may have been copied.
pub(crate) fn copy_spans(dst: &[Span<'_>], src: &[Span<'_>]) -> Result<u64, Fault> {
    let (mut di, mut doff) = (0usize, 0u64);
    let mut copied = 0u64;
    for s in src {
        let mut soff = 0u64;
        while soff < s.len {
            let Some(d) = dst.get(di) else {
                return Ok(copied);
            };
            if doff == d.len {
                di += 1;
                doff = 0;
                continue;
            }
            let n = (s.len - soff).min(d.len - doff);
            if s.odp || d.odp {
                guarded_copy(d.addr + doff, s.addr + soff, n, s.odp, d.odp)?;
            } else {
                // SAFETY: both ranges lie inside live registered regions, pinned (the
                // `Span` invariant: checked bounds, registration held by the read
                // lock), `n` stays within both remainders; `ptr::copy` allows overlap.
                unsafe {
                    core::ptr::copy(
                        s.ptr().add(soff as usize),
                        d.ptr().add(doff as usize),
                        n as usize,
                    );
                }
            }
            soff += n;
            doff += n;
            copied += n;
        }
    }
    Ok(copied)
}

/// Copies `src` into the `dst` spans, in order; returns the bytes copied.
///
/// # Errors
/// [`Fault::Dst`] when on-demand memory of `dst` is not accessible.
pub(crate) fn copy_from_bytes(dst: &[Span<'_>], src: &[u8]) -> Result<u64, Fault> {
    let mut off = 0usize;
    for d in dst {
        if off == src.len() {
            break;
        }
        let n = (src.len() - off).min(d.len as usize);
        if n == 0 {
            continue;
        }
        let from = src.as_ptr() as u64 + off as u64;
        if d.odp {
            guarded_copy(d.addr, from, n as u64, false, true)?;
        } else {
            // SAFETY: `d` is a live, pinned registered range at least `n` bytes long
            // (the `Span` invariant); `src[off..off + n]` is in bounds; a `Vec` owned
            // by the WQE cannot overlap registered application memory.
            unsafe { core::ptr::copy_nonoverlapping(src.as_ptr().add(off), d.ptr(), n) };
        }
        off += n;
    }
    Ok(off as u64)
}

/// Copies from the spans `src`, in order, into `dst` until either ends; returns the
/// bytes copied.
///
/// # Errors
/// [`Fault::Src`] when on-demand memory of `src` is not accessible.
pub(crate) fn copy_to_bytes(dst: &mut [u8], src: &[Span<'_>]) -> Result<u64, Fault> {
    let mut off = 0usize;
    for s in src {
        if off == dst.len() {
            break;
        }
        let n = (dst.len() - off).min(s.len as usize);
        if n == 0 {
            continue;
        }
        if s.odp {
            let to = dst.as_mut_ptr() as u64 + off as u64;
            guarded_copy(to, s.addr, n as u64, true, false)?;
        } else {
            // SAFETY: `s` is a live, pinned registered range at least `n` bytes long
            // (the `Span` invariant); `dst[off..off + n]` is in bounds; a buffer of the
            // provider's own cannot overlap registered application memory.
            unsafe { core::ptr::copy_nonoverlapping(s.ptr(), dst.as_mut_ptr().add(off), n) };
        }
        off += n;
    }
    Ok(off as u64)
}

/// Whether an atomic may operate on `span` in place: always for pinned memory; for an
/// on-demand span, when the mapping under it is readable and writable now (read from
/// `/proc/self/maps`: an atomic cannot go through `process_vm_*`, and reading then
/// writing back to test access would race with other atomics on the word).
pub(crate) fn atomic_accessible(span: &Span<'_>) -> bool {
    accessible(span, true)
}

/// Whether `span` can be read (and, with `write`, written) now: always for pinned
/// memory; for an on-demand span, as its mappings say. For telling which side of a
/// failed copy between processes was at fault.
pub(crate) fn accessible(span: &Span<'_>, write: bool) -> bool {
    !span.odp || mapping_allows(span.addr, span.len, write)
}

/// Whether `[addr, addr + len)` lies in readable (and, with `write`, writable)
/// mappings of this process (`/proc/self/maps`).
fn mapping_allows(addr: u64, len: u64, write: bool) -> bool {
    let Ok(maps) = std::fs::read_to_string("/proc/self/maps") else {
        return false;
    };
    let end = addr.saturating_add(len);
    let mut at = addr;
    // Mappings are listed in address order; adjacent ones may cover the range.
    for line in maps.lines() {
        let mut f = line.split_whitespace();
        let (Some(range), Some(perms)) = (f.next(), f.next()) else {
            continue;
        };
        let Some((lo, hi)) = range.split_once('-') else {
            continue;
        };
        let (Ok(lo), Ok(hi)) = (u64::from_str_radix(lo, 16), u64::from_str_radix(hi, 16)) else {
            continue;
        };
        if lo <= at && at < hi {
            let p = perms.as_bytes();
            if p.first() != Some(&b'r') || (write && p.get(1) != Some(&b'w')) {
                return false;
            }
            at = hi;
            if at >= end {
                return true;
            }
        }
    }
    false
}

/// Views an 8-byte, 8-aligned span as an atomic; `None` when it is not one.
fn atomic<'t>(span: &Span<'t>) -> Option<&'t AtomicU64> {
    if span.len != 8 || span.addr % 8 != 0 {
        return None;
    }
    // SAFETY: the span is 8 live bytes of registered memory, 8-aligned (checked above),
    // valid for the span's lifetime; `AtomicU64` has the size and alignment of `u64`,
    // and every access we make to it is atomic. Registered memory is mutable shared
    // memory by contract (the NIC writes it), so an atomic view is the right model.
    Some(unsafe { AtomicU64::from_ptr(span.ptr().cast::<u64>()) })
}

/// Atomic fetch-and-add on an 8-byte aligned span; the original value, or `None` when
/// the span is not 8 aligned bytes. Host byte order (as rdma_rxe does).
pub(crate) fn fetch_add(span: &Span<'_>, add: u64) -> Option<u64> {
    atomic(span).map(|a| a.fetch_add(add, Ordering::SeqCst))
}

/// Atomic compare-and-swap on an 8-byte aligned span; the original value, or `None` when
/// the span is not 8 aligned bytes. Host byte order.
pub(crate) fn compare_swap(span: &Span<'_>, compare: u64, swap: u64) -> Option<u64> {
    atomic(span).map(|a| {
        match a.compare_exchange(compare, swap, Ordering::SeqCst, Ordering::SeqCst) {
            Ok(v) | Err(v) => v,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(buf: &mut [u8], access: u32) -> MrInfo {
        MrInfo {
            addr: buf.as_mut_ptr() as u64,
            len: buf.len() as u64,
            access,
            dev: 0,
            pd: 1,
            qpn: 0,
        }
    }

    #[test]
    fn a_zero_based_region_maps_from_0_and_is_not_among_the_live_ones() {
        let mut host = vec![0u8; 64];
        let base = host.as_mut_ptr() as u64;
        let mut t = MrTable::default();
        let plain = t.register(info(&mut host, 1)).unwrap();
        let zero = MrInfo {
            addr: 0,
            len: 32,
            ..info(&mut host, 1)
        };
        let k = t.register_at(zero, base + 16).unwrap();
        assert_eq!(t.span(k, 0, 1, 8, 8, 1).unwrap().range(), (base + 24, 8));
        assert_eq!(t.span(k, 0, 1, 30, 4, 0).unwrap_err(), KeyError::Bounds);
        assert_eq!(t.span(plain, 0, 1, base, 8, 0).unwrap().range(), (base, 8));
        let live: Vec<u32> = t.live().into_iter().map(|(key, _)| key).collect();
        assert_eq!(live, [plain]);
        // A slot reused by an ordinary region maps one to one again.
        assert!(t.deregister(k));
        let k2 = t.register(info(&mut host, 1)).unwrap();
        assert_eq!(
            t.span(k2, 0, 1, base + 8, 8, 0).unwrap().range(),
            (base + 8, 8)
        );
    }

    #[test]
    fn update_replaces_a_live_region_under_the_same_key() {
        let mut a = vec![0u8; 64];
        let mut b = vec![0u8; 32];
        let mut t = MrTable::default();
        let k = t.register(info(&mut a, 1)).unwrap();
        assert!(t.update(k, info(&mut b, 3)));
        assert_eq!(t.get(k), Some(&info(&mut b, 3)));
        let base = a.as_ptr() as u64;
        assert_eq!(t.span(k, 0, 1, base, 8, 0).unwrap_err(), KeyError::Bounds);
        assert!(t.deregister(k));
        assert!(!t.update(k, info(&mut a, 1)), "a dead key is not revived");
        assert_eq!(t.len(), 0);
    }

    #[test]
    fn keys_check_bounds_access_pd_and_staleness() {
        let mut buf = vec![0u8; 64];
        let mut t = MrTable::default();
        let k = t.register(info(&mut buf, 1)).unwrap();
        let base = buf.as_ptr() as u64;
        assert!(t.span(k, 0, 1, base, 64, 1).is_ok());
        assert_eq!(
            t.span(k, 0, 1, base + 1, 64, 0).unwrap_err(),
            KeyError::Bounds
        );
        assert_eq!(
            t.span(k, 0, 1, u64::MAX, 2, 0).unwrap_err(),
            KeyError::Bounds
        );
        assert_eq!(t.span(k, 0, 1, base, 8, 2).unwrap_err(), KeyError::Access);
        assert_eq!(t.span(k, 0, 2, base, 8, 0).unwrap_err(), KeyError::WrongPd);
        assert_eq!(t.span(k, 1, 1, base, 8, 0).unwrap_err(), KeyError::BadKey);
        assert_eq!(t.span(0, 0, 1, base, 8, 0).unwrap_err(), KeyError::BadKey);
        assert!(t.deregister(k));
        assert!(!t.deregister(k));
        let k2 = t.register(info(&mut buf, 1)).unwrap();
        assert_ne!(k, k2, "a reused slot gets a new generation");
        assert_eq!(t.span(k, 0, 1, base, 8, 0).unwrap_err(), KeyError::BadKey);
        assert_eq!(t.len(), 1);
    }

    #[test]
    fn scatter_gather_copies_across_uneven_spans() {
        let mut src = (0u8..100).collect::<Vec<_>>();
        let mut dst = vec![0u8; 100];
        let mut t = MrTable::default();
        let ks = t.register(info(&mut src, 0)).unwrap();
        let kd = t.register(info(&mut dst, 1)).unwrap();
        let (s0, d0) = (src.as_ptr() as u64, dst.as_ptr() as u64);
        let srcs = [
            t.span(ks, 0, 1, s0, 10, 0).unwrap(),
            t.span(ks, 0, 1, s0 + 10, 30, 0).unwrap(),
        ];
        let dsts = [
            t.span(kd, 0, 1, d0, 25, 1).unwrap(),
            t.span(kd, 0, 1, d0 + 50, 50, 1).unwrap(),
        ];
        assert_eq!(total(&srcs), 40);
        assert_eq!(copy_spans(&dsts, &srcs), Ok(40));
        assert_eq!(&dst[..25], &src[..25]);
        assert_eq!(&dst[50..65], &src[25..40]);
        assert!(dst[25..50].iter().all(|&b| b == 0));
        assert_eq!(copy_from_bytes(&dsts[..1], &[9; 30]), Ok(25));
        assert_eq!(&dst[..25], &[9; 25]);
    }

    fn bind(handle: u32, key: u32, mr: u32, addr: u64, len: u64) -> BindRequest {
        BindRequest {
            handle,
            new_key: key,
            mr: Some(mr),
            addr,
            len,
            access: vqp_sys::IBV_ACCESS_REMOTE_WRITE,
            dev: 0,
            pd: 1,
            qpn: 0x42,
        }
    }

    #[test]
    fn windows_grant_their_range_through_their_key_only() {
        let mut buf = vec![0u8; 256];
        let mut t = MrTable::default();
        let all = vqp_sys::IBV_ACCESS_LOCAL_WRITE
            | vqp_sys::IBV_ACCESS_REMOTE_WRITE
            | vqp_sys::IBV_ACCESS_MW_BIND;
        let mr = t.register(info(&mut buf, all)).unwrap();
        let base = buf.as_ptr() as u64;
        let w1 = t.alloc_window(vqp_sys::IBV_MW_TYPE_1, 0, 1).unwrap();
        let w2 = t.alloc_window(vqp_sys::IBV_MW_TYPE_2, 0, 1).unwrap();
        let need = vqp_sys::IBV_ACCESS_REMOTE_WRITE;
        assert_eq!(
            t.remote_span(w1, 0, 1, 7, base, 8, need).unwrap_err(),
            KeyError::BadKey,
            "unbound"
        );
        let k1 = (w1 & !0xff) | ((w1 + 1) & 0xff);
        let r = t
            .bind_window(&bind(w1 >> 8, k1, mr, base + 16, 32))
            .unwrap();
        assert_eq!((r.new.map(|n| n.0), r.old), (Some(k1), None));
        assert!(t.remote_span(k1, 0, 1, 7, base + 16, 32, need).is_ok());
        assert_eq!(
            t.remote_span(k1, 0, 1, 7, base + 8, 16, need).unwrap_err(),
            KeyError::Bounds
        );
        assert_eq!(
            t.span(k1, 0, 1, base + 16, 8, 0).unwrap_err(),
            KeyError::BadKey
        );
        // Type 2: answers through its QP only, binds only when free.
        let r = t.bind_window(&bind(w2 >> 8, w2, mr, base, 64)).unwrap();
        assert_eq!(r.new.unwrap().1.qpn, 0x42);
        assert!(t.remote_span(w2, 0, 1, 0x42, base, 8, need).is_ok());
        assert_eq!(
            t.remote_span(w2, 0, 1, 0x43, base, 8, need).unwrap_err(),
            KeyError::BadKey
        );
        assert_eq!(
            t.bind_window(&bind(w2 >> 8, w2 + 1, mr, base, 64))
                .unwrap_err(),
            BindError::Busy
        );
        assert_eq!(t.invalidate(k1, 1, None), Err(KeyError::BadKey), "type 1");
        assert_eq!(t.invalidate(w2, 1, Some(0x43)), Err(KeyError::BadKey));
        assert_eq!(t.invalidate(w2, 1, Some(0x42)), Ok(()));
        assert_eq!(t.invalidate(w2, 1, None), Err(KeyError::BadKey), "twice");
        // Deregistering the region unbinds what lies in it.
        assert_eq!(t.unbind_windows_of(mr), vec![k1]);
        assert!(t.remote_span(k1, 0, 1, 7, base + 16, 8, need).is_err());
        assert_eq!(t.free_window(w1 >> 8), Ok(None));
        assert_eq!(t.free_window(w1 >> 8), Err(()));
    }

    #[test]
    fn on_demand_ranges_must_be_mapped_at_access_time() {
        let mut buf = vec![0u8; 64];
        let mut t = MrTable::default();
        let odp = vqp_sys::IBV_ACCESS_ON_DEMAND | vqp_sys::IBV_ACCESS_LOCAL_WRITE;
        let implicit = MrInfo {
            addr: 0,
            len: u64::MAX,
            access: odp,
            dev: 0,
            pd: 1,
            qpn: 0,
        };
        let k = t.register(implicit).unwrap();
        let base = buf.as_mut_ptr() as u64;
        assert!(t.span(k, 0, 1, base, 64, 0).is_ok());
        // Page 0 is never mapped.
        assert_eq!(t.span(k, 0, 1, 16, 8, 0).unwrap_err(), KeyError::NotMapped);
        assert!(mapped(base, 64));
        assert!(!mapped(0, 4096));
    }

    #[test]
    fn on_demand_copies_fail_where_the_memory_is_not_accessible() {
        // Three pages: read-write, read-only, no access.
        const P: usize = 4096;
        // SAFETY: a fresh anonymous mapping, protected page by page, unmapped below.
        let base = unsafe {
            let p = libc::mmap(
                core::ptr::null_mut(),
                3 * P,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            assert_ne!(p, libc::MAP_FAILED);
            let b = p.cast::<u8>();
            assert_eq!(libc::mprotect(b.add(P).cast(), P, libc::PROT_READ), 0);
            assert_eq!(libc::mprotect(b.add(2 * P).cast(), P, libc::PROT_NONE), 0);
            b as u64
        };
        let mut t = MrTable::default();
        let odp = MrInfo {
            addr: base,
            len: 3 * P as u64,
            access: vqp_sys::IBV_ACCESS_ON_DEMAND | vqp_sys::IBV_ACCESS_LOCAL_WRITE,
            dev: 0,
            pd: 1,
            qpn: 0,
        };
        let k = t.register(odp).unwrap();
        let span = |off: u64, len: u64| t.span(k, 0, 1, base + off, len, 0).unwrap();
        let page = P as u64;
        // Mapped pages of every kind pass the check; the copies tell them apart.
        assert_eq!(copy_spans(&[span(page, 8)], &[span(0, 8)]), Err(Fault::Dst));
        assert_eq!(
            copy_spans(&[span(0, 8)], &[span(2 * page, 8)]),
            Err(Fault::Src)
        );
        assert_eq!(
            copy_from_bytes(&[span(page, 4)], &[1, 2, 3, 4]),
            Err(Fault::Dst)
        );
        let mut out = [0u8; 4];
        assert_eq!(
            copy_to_bytes(&mut out, &[span(2 * page, 4)]),
            Err(Fault::Src)
        );
        // What is accessible is copied, overlapping ranges included.
        assert_eq!(
            copy_from_bytes(&[span(0, 8)], &[1, 2, 3, 4, 5, 6, 7, 8]),
            Ok(8)
        );
        assert_eq!(copy_spans(&[span(2, 6)], &[span(0, 6)]), Ok(6));
        assert_eq!(copy_to_bytes(&mut out, &[span(0, 4)]), Ok(4));
        assert_eq!(out, [1, 2, 1, 2]);
        assert_eq!(
            copy_spans(&[span(page, 4)], &[span(page, 4)]),
            Err(Fault::Dst)
        );
        assert_eq!(
            copy_to_bytes(&mut out, &[span(page, 4)]),
            Ok(4),
            "read-only reads"
        );
        assert!(atomic_accessible(&span(0, 8)));
        assert!(!atomic_accessible(&span(page, 8)));
        assert!(!atomic_accessible(&span(2 * page, 8)));
        assert!(accessible(&span(page, 8), false));
        assert!(!accessible(&span(2 * page, 8), false));
        // SAFETY: the mapping made above, no span of it used any more.
        unsafe { libc::munmap(base as usize as *mut libc::c_void, 3 * P) };
    }

    #[test]
    fn atomics_need_eight_aligned_bytes() {
        let mut words = vec![5u64, 0];
        let mut t = MrTable::default();
        let m = MrInfo {
            addr: words.as_mut_ptr() as u64,
            len: 16,
            access: 0,
            dev: 0,
            pd: 1,
            qpn: 0,
        };
        let k = t.register(m).unwrap();
        let a = t.span(k, 0, 1, m.addr, 8, 0).unwrap();
        assert_eq!(fetch_add(&a, 3), Some(5));
        assert_eq!(compare_swap(&a, 8, 1), Some(8));
        assert_eq!(compare_swap(&a, 8, 2), Some(1));
        let odd = t.span(k, 0, 1, m.addr + 4, 8, 0).unwrap();
        assert_eq!(fetch_add(&odd, 1), None);
        let _ = (a, odd);
        assert_eq!(words[0], 1);
    }
}
