//! XRC domains (eXtended Reliable Connected transport, IBA Vol. 1 §9.8 / Annex A14):
//! the domain that XRC receive QPs and XRC SRQs are created in. A request arriving at
//! an XRC receive QP names, in its XRC extended transport header, the SRQ whose receive
//! it consumes; that SRQ must belong to the QP's domain.
//!
//! A domain opened through a file (`ibv_open_xrcd` with an `fd`) is the same domain for
//! every process of the node that opens the same file on the same device, as the
//! kernel's `ib_uverbs_open_xrcd` keys domains by inode; its identity here is the
//! device and the file's device and inode numbers, and whether it exists is kept in the
//! shared namespace ([`crate::shared::xrcd_hold`]). Without a file (`fd` -1) a domain
//! is private to its opener.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// An XRC domain as one `ibv_open_xrcd` opened it.
pub(crate) struct XrcdCore {
    /// Device index.
    pub dev: usize,
    /// The domain's identity: equal for every opener of the same domain.
    pub id: u64,
    /// QPs and SRQs created in it through this handle (closing it meanwhile is `EBUSY`).
    pub users: AtomicU32,
    /// The machine-wide hold on a file-named domain (dropped with the handle).
    _hold: Option<crate::shared::XrcdHold>,
}

/// The identity of a private domain: bit 63 set, then the process id and a counter, so
/// that it never equals a file-named domain's or another process's.
fn private_id() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    let n = NEXT.fetch_add(1, Ordering::Relaxed) & 0x7fff_ffff;
    (1 << 63) | (u64::from(std::process::id()) << 31) | n
}

/// The identity of the domain of file (`st_dev`, `ino`) on device `dev` (bit 63 clear).
fn file_id(dev: usize, st_dev: u64, ino: u64) -> u64 {
    use std::hash::{Hash, Hasher};
    // A fixed-key hash: every process computes the same value.
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (dev, st_dev, ino).hash(&mut h);
    h.finish() & !(1 << 63)
}

impl XrcdCore {
    /// A private domain of device `dev`.
    pub fn private(dev: usize) -> XrcdCore {
        XrcdCore {
            dev,
            id: private_id(),
            users: AtomicU32::new(0),
            _hold: None,
        }
    }

    /// Domain `id` of device `dev` as another process holds it: what a request
    /// forwarded from that process's XRC receive QP names (`engine::route::namespace::xrc`),
    /// with no hold of its own.
    pub fn remote(dev: usize, id: u64) -> XrcdCore {
        XrcdCore {
            dev,
            id,
            users: AtomicU32::new(0),
            _hold: None,
        }
    }

    /// The domain of device `dev` named by the file open as `fd`, with `oflags`'
    /// `O_CREAT` and `O_EXCL` (see [`crate::shared::xrcd_hold`]): `EBADF` for a
    /// descriptor that is not open, `EAGAIN` for a domain nobody has without
    /// `O_CREAT`, `EINVAL` for an existing one with `O_EXCL`.
    pub fn of_file(dev: usize, fd: i32, oflags: i32) -> Result<XrcdCore, i32> {
        use std::os::unix::fs::MetadataExt;
        // The descriptor's file through its magic link (which reaches an unlinked file
        // too): its device and inode.
        let meta = (fd >= 0)
            .then(|| std::fs::metadata(format!("/proc/self/fd/{fd}")).ok())
            .flatten()
            .ok_or(libc::EBADF)?;
        let (st_dev, ino) = (meta.dev(), meta.ino());
        let (hold, _) = crate::shared::xrcd_hold(
            dev,
            st_dev,
            ino,
            oflags & libc::O_CREAT != 0,
            oflags & libc::O_EXCL != 0,
        )?;
        Ok(XrcdCore {
            dev,
            id: file_id(dev, st_dev, ino),
            users: AtomicU32::new(0),
            _hold: Some(hold),
        })
    }
}

/// The handles on an XRC receive QP: the creator's and those `ibv_open_qp` made, each
/// with its context, in this process or (by handle value) in another. As the kernel's
/// shared XRC TGT QP (`create_xrc_qp_user` opens the creator's handle like any other,
/// `__ib_destroy_shared_qp` destroys the QP when the last handle closes,
/// `__ib_shared_qp_event_handler` hands each event to every handle): the QP lives while
/// any handle holds it, and its affiliated events are raised on every handle's context
/// with that handle. In a process that opened another process's QP, the handle's
/// stand-in QP names that process ([`TgtHandles::owner`]).
#[derive(Default)]
pub(crate) struct TgtHandles {
    local: std::sync::Mutex<Vec<(std::sync::Arc<crate::cq::CtxCore>, usize)>>,
    remote: std::sync::Mutex<Vec<(crate::shared::Owner, u64)>>,
    owner: std::sync::OnceLock<crate::shared::Owner>,
}

impl TgtHandles {
    /// Adds handle `handle` of context `ctx`.
    pub fn add(&self, ctx: std::sync::Arc<crate::cq::CtxCore>, handle: usize) {
        crate::os::lock(&self.local).push((ctx, handle));
    }

    /// Adds handle `handle` of process `o`.
    pub fn add_remote(&self, o: crate::shared::Owner, handle: u64) {
        crate::os::lock(&self.remote).push((o, handle));
    }

    /// Drops handle `handle` of process `o`; how many handles of other processes
    /// remain, and how many in all.
    pub fn remove_remote(&self, o: crate::shared::Owner, handle: u64) -> (usize, usize) {
        let mut r = crate::os::lock(&self.remote);
        r.retain(|&(p, h)| (p, h) != (o, handle));
        (r.len(), r.len() + crate::os::lock(&self.local).len())
    }

    /// Drops our handle `handle`: one of ours that remains, and whether any handle
    /// remains (handles of processes that died are forgotten; `ns`: the namespace
    /// this process joined, which tells).
    pub fn remove(
        &self,
        handle: usize,
        ns: Option<&crate::shared::Shared>,
    ) -> (Option<usize>, bool) {
        let mut l = crate::os::lock(&self.local);
        l.retain(|(_, h)| *h != handle);
        let mut r = crate::os::lock(&self.remote);
        if let Some(sh) = ns {
            r.retain(|(o, _)| sh.is_alive(*o));
        }
        (l.first().map(|(_, h)| *h), !l.is_empty() || !r.is_empty())
    }

    /// Marks the QP as a stand-in for QP of process `o` (opened from here).
    pub fn set_owner(&self, o: crate::shared::Owner) {
        let _ = self.owner.set(o);
    }

    /// The process owning the QP this one stands in for, if it is a stand-in.
    pub fn owner(&self) -> Option<crate::shared::Owner> {
        self.owner.get().copied()
    }

    /// Raises `kind` on every handle (another process's through its inbox, in `ns`,
    /// the namespace this process joined); false when there are none (not an XRC
    /// receive QP: the caller raises it on its one handle).
    pub fn raise(&self, kind: u32, ns: Option<&crate::shared::Shared>) -> bool {
        let l = crate::os::lock(&self.local);
        for (ctx, h) in l.iter() {
            ctx.raise(kind, *h);
        }
        let r = crate::os::lock(&self.remote);
        if let Some(sh) = ns.filter(|_| !r.is_empty()) {
            for &(o, h) in r.iter() {
                if let Some(inbox) = sh.peer_inbox(o) {
                    let mut rec =
                        crate::shared::inbox::Record::new(crate::shared::inbox::Kind::XrcEvent);
                    rec.code = kind;
                    rec.from_pid = sh.me.pid;
                    rec.from_token = sh.me.token;
                    rec.remote_addr = h;
                    let _ = inbox.push(&rec, &[]);
                }
            }
        }
        !l.is_empty() || !r.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identities_of_files_and_private_domains_never_meet() {
        assert_eq!(file_id(0, 1, 2), file_id(0, 1, 2));
        assert_ne!(file_id(0, 1, 2), file_id(1, 1, 2));
        let (a, b) = (XrcdCore::private(0), XrcdCore::private(0));
        assert_ne!(a.id, b.id);
        assert_ne!(a.id >> 63, file_id(0, 1, 2) >> 63);
    }
}
