//! Work requests as the queues hold them — the scatter/gather list, the send and
//! receive WQE, a UD send's destination — and the queue limits the device reports.
//! Shared by the QP's queues and the SRQ's, below both.

use std::time::Instant;

use vqp_sys::ibv_sge;

/// Pending WQEs a QP's send queue holds at most (`max_qp_wr`).
pub(crate) const MAX_QP_WR: u32 = 16384;
/// Scatter/gather entries per WQE at most (`max_sge`).
pub(crate) const MAX_SGE: u32 = 32;
/// Inline payload per WQE at most.
pub(crate) const MAX_INLINE: u32 = 1024;
/// Outstanding RDMA READ/atomic per QP, each direction.
pub(crate) const MAX_RD_ATOMIC: u8 = 16;
/// Largest message (`max_msg_sz`).
pub(crate) const MAX_MSG: u64 = 1 << 31;

/// A WQE's scatter/gather list; two entries stay inline, more spill to the heap.
#[derive(Clone, Debug, Default)]
pub(crate) struct Sges {
    arr: [ibv_sge; 2],
    n: u8,
    spill: Vec<ibv_sge>,
}

impl Sges {
    /// Copies a list.
    pub fn from_slice(s: &[ibv_sge]) -> Sges {
        let mut out = Sges::default();
        if s.len() <= out.arr.len() {
            out.arr[..s.len()].copy_from_slice(s);
            out.n = s.len() as u8;
        } else {
            out.spill = s.to_vec();
        }
        out
    }

    /// The entries.
    pub fn as_slice(&self) -> &[ibv_sge] {
        if self.spill.is_empty() {
            &self.arr[..usize::from(self.n)]
        } else {
            &self.spill
        }
    }

    /// Sum of the entries' lengths.
    pub fn total(&self) -> u64 {
        self.as_slice().iter().map(|s| u64::from(s.length)).sum()
    }
}

/// A posted send WQE, as the engine executes it.
#[derive(Debug)]
pub(crate) struct SendWqe {
    pub wr_id: u64,
    /// `IBV_WR_*`.
    pub opcode: u32,
    /// Generates a completion on success.
    pub signaled: bool,
    /// The solicited-event bit.
    pub solicited: bool,
    /// Immediate data as posted (network order); for `IBV_WR_LOCAL_INV` and
    /// `IBV_WR_SEND_WITH_INV` the rkey to invalidate (the same union in
    /// `ibv_send_wr`).
    pub imm: u32,
    /// The local buffers (unused when `inline` is set).
    pub sges: Sges,
    /// Data copied at post time for `IBV_SEND_INLINE`.
    pub inline: Option<Box<[u8]>>,
    pub remote_addr: u64,
    pub rkey: u32,
    pub compare_add: u64,
    pub swap: u64,
    /// Not executed before this instant (delay fault).
    pub ready_at: Option<Instant>,
    /// A UD send's destination.
    pub ud: Option<Datagram>,
    /// Its bytes have a slot on the device's link (a rated link: see `link`).
    pub shaped: bool,
    /// What an `IBV_WR_BIND_MW` binds (its window, region, range and rights).
    pub bind: Option<Box<crate::mem::BindRequest>>,
    /// An XRC send's remote SRQ number (`qp_type.xrc.remote_srqn`, carried in the
    /// request's XRC extended transport header); 0 for other QP types.
    pub xrc_srqn: u32,
}

impl SendWqe {
    /// Records the destination GID of a datagram to another machine (its address
    /// handle's GID names no device here). It rides in the atomic operands, which a UD
    /// send has no use for, so that no WQE grows for it.
    pub fn set_remote_dgid(&mut self, gid: &[u8; 16]) {
        (self.compare_add, self.swap) = Self::dgid_operands(gid);
    }

    /// The `compare_add` and `swap` that record `gid` (see
    /// [`SendWqe::set_remote_dgid`]).
    pub fn dgid_operands(gid: &[u8; 16]) -> (u64, u64) {
        let (hi, lo) = gid.split_at(8);
        (
            u64::from_be_bytes(hi.try_into().unwrap_or_default()),
            u64::from_be_bytes(lo.try_into().unwrap_or_default()),
        )
    }

    /// The destination GID [`SendWqe::set_remote_dgid`] recorded.
    pub fn remote_dgid(&self) -> [u8; 16] {
        let mut g = [0u8; 16];
        g[..8].copy_from_slice(&self.compare_add.to_be_bytes());
        g[8..].copy_from_slice(&self.swap.to_be_bytes());
        g
    }

    /// Bytes the WQE puts on the wire (its SGEs' lengths as posted, or the inline
    /// data's).
    pub fn wire_len(&self) -> u64 {
        self.inline
            .as_ref()
            .map_or_else(|| self.sges.total(), |d| d.len() as u64)
    }
}

/// Where a UD send goes: from its address handle and work request.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Datagram {
    /// The device the address handle resolves to (`None`: no such device, the
    /// datagram is lost).
    pub dev: Option<usize>,
    /// Destination QP number.
    pub qpn: u32,
    /// The Q_Key as posted (high bit set: use the sending QP's own).
    pub qkey: u32,
    /// The address handle has a global route: the receiver gets a GRH.
    pub global: bool,
    /// The global route's source GID index (the sender's GID in the receiver's GRH).
    pub sgid_index: u8,
}

/// The largest UD message: the port's MTU (`IBV_MTU_4096`).
pub(crate) const UD_MTU: u64 = 4096;
/// Bytes at the head of every UD receive buffer for the GRH (filled or not).
pub(crate) const GRH_BYTES: u64 = 40;

/// A posted receive WQE.
#[derive(Debug)]
pub(crate) struct RecvWqe {
    pub wr_id: u64,
    pub sges: Sges,
}
