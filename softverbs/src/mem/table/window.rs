//! Memory windows: their slots in the key table, binding (type 1 through
//! `ibv_bind_mw`, type 2 by work request) and invalidation, and the windows a
//! deregistered region or a destroyed QP takes with it.

use super::MrTable;
use crate::mem::{KeyError, MrInfo};

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
pub(super) struct Window {
    /// `IBV_MW_TYPE_1` or `IBV_MW_TYPE_2`.
    pub(super) ty: u32,
    pub(super) pd: u32,
    pub(super) dev: usize,
    /// Its binding. A mutex rather than the table's write lock: the engine binds and
    /// invalidates windows in the order of a QP's work requests while it holds the
    /// table's read lock.
    pub(super) bound: std::sync::Mutex<Option<Binding>>,
}

/// A window's binding.
#[derive(Clone, Copy, Debug)]
pub(super) struct Binding {
    /// The rkey it answers to.
    pub(super) key: u32,
    /// The range and rights it grants (and, for type 2, its QP).
    pub(super) info: MrInfo,
    /// The key of the region it lies in (deregistering that region unbinds it).
    pub(super) parent: u32,
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

/// Access bits a window grants.
const WINDOW_ACCESS: u32 = vqp_sys::IBV_ACCESS_REMOTE_WRITE
    | vqp_sys::IBV_ACCESS_REMOTE_READ
    | vqp_sys::IBV_ACCESS_REMOTE_ATOMIC;

impl MrTable {
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

    pub(super) fn window(&self, handle: u32) -> Option<&Window> {
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mem::test_region as info;

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
}
