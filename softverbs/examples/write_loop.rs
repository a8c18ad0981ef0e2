//! The smallest in-process RDMA WRITE loop, for counting the provider's instructions
//! per WQE under callgrind: one RC QP on `soft0` writing 64-byte chunks to one on
//! `soft1` of the same process, the engine run inline by the loop's own `poll_cq`
//! (the shapes of `benches/provider.rs`'s `write_64B`, without criterion).
//!
//! `cargo run --release -p vqp-softverbs --example write_loop -- SHAPE ROUNDS`, SHAPE one
//! of `last` (chains of 32, the last signaled), `all` (chains of 32, each signaled),
//! `single` (one signaled WQE per post and per poll). Instructions per WQE: run it
//! under `valgrind --tool=callgrind` with two round counts and divide the difference
//! of the totals by the difference of the WQE counts (the set-up cancels out).

use std::ptr::null_mut;

use vqp_host::connect::{self, Address, Path};
use vqp_host::sys::*;
use vqp_host::{AccessFlags, QpCap, QpInit, Verbs, Wc};

const LEN: usize = 64;

fn main() {
    let mut args = std::env::args().skip(1);
    let shape = args.next().unwrap_or_else(|| "last".into());
    let rounds: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(1000);
    let (chain, signal_all) = match shape.as_str() {
        "last" => (32, false),
        "all" => (32, true),
        "single" => (1, true),
        other => {
            eprintln!("write_loop: unknown shape {other:?} (last, all, single)");
            std::process::exit(2);
        }
    };

    vqp_softverbs::set_progress(vqp_softverbs::Progress::Inline);
    // SAFETY: the provider's functions implement the libibverbs ABI.
    let v = unsafe { Verbs::from_table(vqp_softverbs::verbs_table()) };
    let c0 = vqp_host::Context::open(&v, Some("soft0")).expect("soft0");
    let c1 = vqp_host::Context::open(&v, Some("soft1")).expect("soft1");
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
    let src = pd0
        .register_buffer(1 << 16, AccessFlags::ALL_REMOTE)
        .unwrap();
    let dst = pd1
        .register_buffer(1 << 16, AccessFlags::ALL_REMOTE)
        .unwrap();

    let mut sges: Vec<ibv_sge> = (0..chain)
        .map(|i| src.sge((i * LEN) % src.len(), LEN).unwrap())
        .collect();
    let mut wrs: Vec<ibv_send_wr> = (0..chain)
        .map(|i| {
            let mut w = ibv_send_wr {
                wr_id: i as u64,
                sg_list: &mut sges[i],
                num_sge: 1,
                opcode: IBV_WR_RDMA_WRITE,
                send_flags: if signal_all || i + 1 == chain {
                    IBV_SEND_SIGNALED
                } else {
                    0
                },
                ..Default::default()
            };
            w.wr.rdma = ibv_send_wr_rdma {
                remote_addr: dst.addr() + ((i * LEN) % dst.len()) as u64,
                rkey: dst.rkey(),
            };
            w
        })
        .collect();
    let base = wrs.as_mut_ptr();
    for i in 0..chain {
        let next = if i + 1 < chain {
            // SAFETY: index within the vector.
            unsafe { base.add(i + 1) }
        } else {
            null_mut()
        };
        // SAFETY: index within the vector.
        unsafe { (*base.add(i)).next = next };
    }
    let expect = if signal_all { chain } else { 1 };
    let mut wcs = [Wc::default(); 64];
    for _ in 0..rounds {
        // SAFETY: a valid chain over registered buffers that outlive the completions.
        unsafe { qp.post_send(&mut wrs[0]) }.unwrap();
        let mut got = 0;
        while got < expect {
            let polled = cq.poll(&mut wcs).unwrap();
            assert!(polled.iter().all(|w| w.is_ok()), "a WRITE failed");
            got += polled.len();
        }
    }
    println!("{shape}: {rounds} rounds of {chain} WQEs");
}
