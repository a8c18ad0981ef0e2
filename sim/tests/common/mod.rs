//! Shared set-up for the behaviour tests: a connected pair of QPs with buffers.
#![allow(dead_code)]

use vqp_core::{Opcode, PhysCq, PhysWc, RecvWqe, SendFlags, SendWqe, WcStatus};
use vqp_sim::{Access, Mr, Nic, NicConfig, QpCaps, SimCq, SimQp};

/// Two connected QPs: `a` on device 0, `b` on `dev_b`, each with its own CQ (for sends
/// and receives) and a 4 KiB buffer registered with every right.
pub struct Pair {
    pub nic: Nic,
    pub a: SimQp,
    pub b: SimQp,
    pub cq_a: SimCq,
    pub cq_b: SimCq,
    pub mr_a: Mr,
    pub mr_b: Mr,
}

pub const CAPS: QpCaps = QpCaps {
    max_send_wr: 16,
    max_recv_wr: 16,
};

pub fn pair_with(config: NicConfig, dev_b: usize, cq_capacity: usize) -> Pair {
    let nic = Nic::new(config);
    let cq_a = nic.create_cq(0, cq_capacity).unwrap();
    let cq_b = nic.create_cq(dev_b, cq_capacity).unwrap();
    let a = nic.create_qp(0, &cq_a, &cq_a, CAPS).unwrap();
    let b = nic.create_qp(dev_b, &cq_b, &cq_b, CAPS).unwrap();
    nic.connect(&a, &b).unwrap();
    let mr_a = nic.alloc_mr(0, 4096, Access::ALL).unwrap();
    let mr_b = nic.alloc_mr(dev_b, 4096, Access::ALL).unwrap();
    Pair {
        nic,
        a,
        b,
        cq_a,
        cq_b,
        mr_a,
        mr_b,
    }
}

/// A pair on one device with 64-entry CQs.
pub fn pair() -> Pair {
    pair_with(NicConfig::default(), 0, 64)
}

/// A signaled send WQE from `local[loff..loff + len]` to `remote[roff..]`.
pub fn wqe(
    wr_id: u64,
    opcode: Opcode,
    local: &Mr,
    loff: u64,
    len: u32,
    remote: &Mr,
    roff: u64,
) -> SendWqe {
    SendWqe {
        wr_id,
        opcode,
        flags: SendFlags::SIGNALED,
        addr: local.at(loff),
        len,
        lkey: local.lkey,
        remote_addr: remote.at(roff),
        rkey: remote.rkey,
        ..SendWqe::default()
    }
}

/// A receive of `len` bytes at `mr[off..]`.
pub fn recv(wr_id: u64, mr: &Mr, off: u64, len: u32) -> RecvWqe {
    RecvWqe {
        wr_id,
        addr: mr.at(off),
        len,
        lkey: mr.lkey,
    }
}

/// A byte pattern that differs at every position and between seeds.
pub fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// Polls everything, one completion at a time (exercising small poll buffers).
pub fn drain_one_by_one(cq: &mut impl PhysCq) -> Vec<PhysWc> {
    let mut all = Vec::new();
    let mut one = [PhysWc::EMPTY; 1];
    while cq.poll(&mut one).unwrap() == 1 {
        all.push(one[0]);
    }
    all
}

/// The (wr_id, status) of each completion.
pub fn ids_status(wcs: &[PhysWc]) -> Vec<(u64, WcStatus)> {
    wcs.iter().map(|w| (w.wr_id, w.status)).collect()
}
