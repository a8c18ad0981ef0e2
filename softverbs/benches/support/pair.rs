//! Two RC QPs of one process, on `soft0` and `soft1`, the engine run inline, and chains
//! of small RDMA WRITEs between them: the provider bench's rig (`benches/provider.rs`),
//! shared with the instruction-count loop (`examples/write_loop.rs`).
#![allow(dead_code)]

use std::ptr::null_mut;

use vqp_host::connect::{self, Address, Path};
use vqp_host::sys::*;
use vqp_host::{
    AccessFlags, CompletionQueue, Context, MemoryRegion, QpCap, QpInit, QueuePair, Verbs, Wc,
};

/// The two QPs, connected, with a source region beside the requester and a
/// destination region beside the responder.
pub struct Pair {
    _ctx: (Context, Context),
    pub cq: CompletionQueue,
    pub qp: QueuePair,
    _peer: QueuePair,
    pub src: MemoryRegion,
    pub dst: MemoryRegion,
}

/// A [`Pair`] with regions of `len` bytes.
pub fn pair(len: usize) -> Pair {
    vqp_softverbs::set_progress(vqp_softverbs::Progress::Inline);
    // SAFETY: the provider's functions implement the libibverbs ABI.
    let v = unsafe { Verbs::from_table(vqp_softverbs::verbs_table()) };
    let c0 = Context::open(&v, Some("soft0")).unwrap();
    let c1 = Context::open(&v, Some("soft1")).unwrap();
    let (pd0, pd1) = (c0.alloc_pd().unwrap(), c1.alloc_pd().unwrap());
    let cq = c0.create_cq(4096, None, 0).unwrap();
    let cq1 = c1.create_cq(64, None, 0).unwrap();
    let cap = QpCap {
        max_send_wr: 1024,
        max_recv_wr: 16,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 64,
    };
    let qp = pd0.create_qp(&QpInit::rc(&cq, cap)).unwrap();
    let peer = pd1.create_qp(&QpInit::rc(&cq1, cap)).unwrap();
    connect::connect(&qp, &Path::new(1, Address::lid(2), peer.qp_num(), 0, 0)).unwrap();
    connect::connect(&peer, &Path::new(1, Address::lid(1), qp.qp_num(), 0, 0)).unwrap();
    let src = pd0.register_buffer(len, AccessFlags::ALL_REMOTE).unwrap();
    let dst = pd1.register_buffer(len, AccessFlags::ALL_REMOTE).unwrap();
    Pair {
        _ctx: (c0, c1),
        cq,
        qp,
        _peer: peer,
        src,
        dst,
    }
}

/// A chain of `n` RDMA WRITEs of `len` bytes; only the last is signaled when
/// `signal_last_only`.
pub fn chain(
    p: &Pair,
    n: usize,
    len: usize,
    signal_last_only: bool,
    sges: &mut Vec<ibv_sge>,
) -> Vec<ibv_send_wr> {
    sges.clear();
    for i in 0..n {
        sges.push(p.src.sge((i * len) % p.src.len(), len).unwrap());
    }
    let mut wrs: Vec<ibv_send_wr> = (0..n)
        .map(|i| {
            let mut w = ibv_send_wr {
                wr_id: i as u64,
                sg_list: &mut sges[i],
                num_sge: 1,
                opcode: IBV_WR_RDMA_WRITE,
                send_flags: if signal_last_only && i + 1 < n {
                    0
                } else {
                    IBV_SEND_SIGNALED
                },
                ..Default::default()
            };
            w.wr.rdma = ibv_send_wr_rdma {
                remote_addr: p.dst.addr() + ((i * len) % p.dst.len()) as u64,
                rkey: p.dst.rkey(),
            };
            w
        })
        .collect();
    let base = wrs.as_mut_ptr();
    for i in 0..n - 1 {
        // SAFETY: indices within the vector; the last `next` stays null.
        unsafe { (*base.add(i)).next = base.add(i + 1) };
    }
    // SAFETY: index within the vector.
    unsafe { (*base.add(n - 1)).next = null_mut() };
    wrs
}

/// Posts the chain and polls until its `expect` completions arrived.
pub fn round(p: &Pair, wrs: &mut [ibv_send_wr], expect: usize, wcs: &mut [Wc]) {
    // SAFETY: a valid chain over registered buffers that outlive the completions.
    unsafe { p.qp.post_send(&mut wrs[0]) }.unwrap();
    let mut got = 0;
    while got < expect {
        let polled = p.cq.poll(wcs).unwrap();
        debug_assert!(polled.iter().all(|w| w.is_ok()));
        got += polled.len();
    }
}
