//! softverbs across processes: two processes of this test binary (the test and a child
//! it spawns, see `xproc_support`) share devices and QP numbers and run every RC
//! operation between their private memories. Every test is bounded in time.

mod common;
mod xproc_support;
mod xverbs_support;

use std::time::{Duration, Instant};

use common::*;
use vqp_host::sys::*;
use xproc_support::*;

/// The child's entry point: does nothing unless this binary was started as a child.
#[test]
fn child() {
    if std::env::var_os(ENV_CHILD).is_some() {
        child_main();
    }
}

/// Our side on `dev`, connected to a child's side on `peer_dev`.
fn connected(dev: &str, peer_dev: &str, o: &Opts) -> (Side, Peer, (u32, u16, u64, u32)) {
    isolate();
    let v = verbs();
    let s = side(&v, dev, o);
    let mut peer = Peer::spawn();
    let remote = peer.side(peer_dev);
    let lid = s.ctx.query_port(1).unwrap().lid();
    peer.cmd(&format!("connect {lid} {}", s.qp.qp_num()));
    connect_to(&s.qp, remote.1, remote.0, o, 14);
    (s, peer, remote)
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len() / 2)
        .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap())
        .collect()
}

/// WRITE 1 of `sge` to `addr` with a key its owner never issued (`rkey` with its
/// generation byte changed).
fn bad_rkey_write(sge: &mut ibv_sge, addr: u64, rkey: u32) -> ibv_send_wr {
    wr_rdma(
        1,
        IBV_WR_RDMA_WRITE,
        std::slice::from_mut(sge),
        addr,
        rkey ^ 0x100,
    )
}

fn wr_rdma(wr_id: u64, op: u32, sge: &mut [ibv_sge], addr: u64, rkey: u32) -> ibv_send_wr {
    let mut wr = send_wr(wr_id, op, sge);
    wr.wr.rdma = ibv_send_wr_rdma {
        remote_addr: addr,
        rkey,
    };
    wr
}

#[test]
fn qp_numbers_are_machine_wide_and_resolve_to_their_process() {
    isolate();
    let v = verbs();
    let mine = side(&v, "soft0", &Opts::default());
    let mut peer = Peer::spawn();
    let (theirs, _, _, _) = peer.side("soft0");
    assert_ne!(mine.qp.qp_num(), theirs, "same device, two processes");
    assert_eq!(
        vqp_softverbs::qp_owner_pid(0, theirs),
        Some(peer.pid()),
        "the number resolves to the child"
    );
    assert_eq!(
        vqp_softverbs::qp_owner_pid(0, mine.qp.qp_num()),
        Some(std::process::id())
    );
    assert_eq!(vqp_softverbs::qp_owner_pid(1, theirs), None, "not on soft1");
    // A process that dies releases its numbers: they are reclaimed on lookup.
    peer.kill();
    assert_eq!(vqp_softverbs::qp_owner_pid(0, theirs), None);
}

#[test]
fn every_operation_moves_data_between_two_processes() {
    let o = Opts::default();
    let (mut a, mut peer, (_, _, raddr, rkey)) = connected("soft0", "soft1", &o);
    fill(&mut a, 3);
    peer.cmd("fill 9");
    let a0 = bytes(&a).to_vec();
    let b0 = unhex(&peer.cmd("read 0 65536")[0]);

    // WRITE: a[100..40100] → b[1000..41000].
    let mut sge = a.mr.sge(100, 40000).unwrap();
    let mut wr = wr_rdma(
        1,
        IBV_WR_RDMA_WRITE,
        std::slice::from_mut(&mut sge),
        raddr + 1000,
        rkey,
    );
    post(&a, &mut wr);
    let wc = poll_n(&a.cq, 1);
    assert!(wc[0].is_ok(), "{:?}", wc[0]);
    let b = unhex(&peer.cmd("read 0 65536")[0]);
    assert_eq!(&b[1000..41000], &a0[100..40100]);
    assert_eq!(&b[..1000], &b0[..1000]);
    assert_eq!(&b[41000..], &b0[41000..]);

    // WRITE_WITH_IMM consumes a receive over there.
    peer.cmd("recv 1 60000 16");
    let mut sge = a.mr.sge(0, 300).unwrap();
    let mut wr = wr_rdma(
        2,
        IBV_WR_RDMA_WRITE_WITH_IMM,
        std::slice::from_mut(&mut sge),
        raddr + 50000,
        rkey,
    );
    wr.imm.imm_data = 0xfeed_f00du32.to_be();
    post(&a, &mut wr);
    assert!(poll_n(&a.cq, 1)[0].is_ok());
    let wcs = peer.cmd("poll 1");
    assert_eq!(
        wcs[0],
        format!(
            "wc 1000 0 {IBV_WC_RECV_RDMA_WITH_IMM} 300 {}",
            0xfeed_f00du32.to_be()
        )
    );
    assert_eq!(&unhex(&peer.cmd("read 50000 300")[0]), &a0[..300]);

    // READ: b[2000..10000] → a[20000..28000].
    let mut sge = a.mr.sge(20000, 8000).unwrap();
    let mut wr = wr_rdma(
        3,
        IBV_WR_RDMA_READ,
        std::slice::from_mut(&mut sge),
        raddr + 2000,
        rkey,
    );
    post(&a, &mut wr);
    let wc = poll_n(&a.cq, 1);
    assert!(wc[0].is_ok(), "{:?}", wc[0]);
    assert_eq!(wc[0].byte_len(), 8000);
    let b = unhex(&peer.cmd("read 0 65536")[0]);
    assert_eq!(&bytes(&a)[20000..28000], &b[2000..10000]);

    // SEND_WITH_IMM from two SGEs into a receive of one.
    peer.cmd("recv 1 30000 1000");
    let mut sges = [a.mr.sge(40000, 250).unwrap(), a.mr.sge(41000, 150).unwrap()];
    let mut wr = send_wr(4, IBV_WR_SEND_WITH_IMM, &mut sges);
    wr.imm.imm_data = 7u32.to_be();
    post(&a, &mut wr);
    let wc = poll_n(&a.cq, 1);
    assert!(wc[0].is_ok(), "{:?}", wc[0]);
    assert_eq!(
        peer.cmd("poll 1")[0],
        format!("wc 1000 0 {IBV_WC_RECV} 400 {}", 7u32.to_be())
    );
    let mut sent = a0[40000..40250].to_vec();
    sent.extend_from_slice(&a0[41000..41150]);
    assert_eq!(unhex(&peer.cmd("read 30000 400")[0]), sent);

    // Inline SEND: the bytes travel in the request itself.
    peer.cmd("recv 1 33000 100");
    let mut sge = a.mr.sge(500, 64).unwrap();
    let mut wr = send_wr(5, IBV_WR_SEND, std::slice::from_mut(&mut sge));
    wr.send_flags |= IBV_SEND_INLINE;
    post(&a, &mut wr);
    assert!(poll_n(&a.cq, 1)[0].is_ok());
    assert_eq!(
        peer.cmd("poll 1")[0],
        format!("wc 1000 0 {IBV_WC_RECV} 64 0")
    );
    assert_eq!(unhex(&peer.cmd("read 33000 64")[0]), &a0[500..564]);

    // Both atomics on b[48..56]; the original values land in a.
    let word = u64::from_ne_bytes(b[48..56].try_into().unwrap());
    let mut sge = a.mr.sge(64, 8).unwrap();
    let mut wr = send_wr(
        6,
        IBV_WR_ATOMIC_FETCH_AND_ADD,
        std::slice::from_mut(&mut sge),
    );
    wr.wr.atomic = ibv_send_wr_atomic {
        remote_addr: raddr + 48,
        compare_add: 5,
        swap: 0,
        rkey,
    };
    post(&a, &mut wr);
    assert!(poll_n(&a.cq, 1)[0].is_ok());
    assert_eq!(&bytes(&a)[64..72], &word.to_ne_bytes());
    let mut wr = send_wr(7, IBV_WR_ATOMIC_CMP_AND_SWP, std::slice::from_mut(&mut sge));
    wr.wr.atomic = ibv_send_wr_atomic {
        remote_addr: raddr + 48,
        compare_add: word.wrapping_add(5),
        swap: 0x1122_3344_5566_7788,
        rkey,
    };
    post(&a, &mut wr);
    let wc = poll_n(&a.cq, 1);
    assert!(wc[0].is_ok());
    assert_eq!(wc[0].byte_len(), 8);
    assert_eq!(&bytes(&a)[64..72], &word.wrapping_add(5).to_ne_bytes());
    assert_eq!(
        unhex(&peer.cmd("read 48 8")[0]),
        0x1122_3344_5566_7788u64.to_ne_bytes()
    );

    // A chain of unsignaled WRITEs ending in a signaled one: one completion, order
    // kept (each WRITE overwrites the same bytes; the last one wins).
    let mut sges: Vec<ibv_sge> = (0..16).map(|i| a.mr.sge(i * 1000, 1000).unwrap()).collect();
    let mut wrs: Vec<ibv_send_wr> = sges
        .iter_mut()
        .enumerate()
        .map(|(i, s)| {
            let mut w = wr_rdma(
                100 + i as u64,
                IBV_WR_RDMA_WRITE,
                std::slice::from_mut(s),
                raddr,
                rkey,
            );
            w.send_flags = if i == 15 { IBV_SEND_SIGNALED } else { 0 };
            w
        })
        .collect();
    for i in 0..15 {
        let next: *mut ibv_send_wr = &mut wrs[i + 1];
        wrs[i].next = next;
    }
    post(&a, &mut wrs[0]);
    let wc = poll_n(&a.cq, 1);
    assert_eq!(wc[0].wr_id(), 115);
    assert!(wc[0].is_ok());
    assert!(
        drain(&a.cq, 20).is_empty(),
        "unsignaled WRs complete silently"
    );
    assert_eq!(unhex(&peer.cmd("read 0 1000")[0]), &a0[15000..16000]);
    peer.cmd("exit");
}

#[test]
fn two_processes_hammering_one_counter_add_up_exactly() {
    isolate();
    let v = verbs();
    let o = Opts::default();
    const N: u64 = 1000;
    let mut s = side(&v, "soft1", &o);
    // A second QP in the same PD, so both children may use the one MR.
    let qp2 = s.pd.create_qp(&vqp_host::QpInit::rc(&s.cq, o.cap)).unwrap();
    let my_lid = s.ctx.query_port(1).unwrap().lid();
    let mut peers = Vec::new();
    for qp in [&s.qp, &qp2] {
        let mut p = Peer::spawn();
        let (qpn, lid, _, _) = p.side("soft0");
        p.cmd(&format!("connect {my_lid} {}", qp.qp_num()));
        connect_to(qp, lid, qpn, &o, 14);
        peers.push(p);
    }
    bytes_mut(&mut s)[..8].copy_from_slice(&0u64.to_ne_bytes());
    let (addr, rkey) = (s.mr.addr(), s.mr.rkey());
    for p in peers.iter_mut() {
        p.send(&format!("fadd {N} {addr} {rkey}"));
    }
    for p in peers.iter_mut() {
        p.answer();
    }
    let total = u64::from_ne_bytes(bytes(&s)[..8].try_into().unwrap());
    assert_eq!(
        total,
        2 * N,
        "every fetch-add of both processes counted once"
    );
}

#[test]
fn rnr_then_success_when_the_receive_comes_late() {
    let o = Opts::default();
    let (a, mut peer, _) = connected("soft0", "soft1", &o);
    let mut sge = a.mr.sge(0, 128).unwrap();
    let mut wr = send_wr(9, IBV_WR_SEND, std::slice::from_mut(&mut sge));
    post(&a, &mut wr);
    // No receive yet: the send NAKs and retries (rnr_retry 7 = forever).
    assert!(drain(&a.cq, 50).is_empty());
    peer.cmd("recv 1 0 256");
    let wc = poll_n(&a.cq, 1);
    assert!(wc[0].is_ok(), "{:?}", wc[0]);
    assert_eq!(
        peer.cmd("poll 1")[0],
        format!("wc 1000 0 {IBV_WC_RECV} 128 0")
    );
}

/// A request to another process's QP that is not connected yet is lost and
/// retransmitted: once the peer connects back (here 150 ms later, within the 7 × 67 ms
/// of retries), the WRITE lands and completes successfully.
#[test]
fn a_peer_connected_late_takes_the_retransmission() {
    isolate();
    let o = Opts::default();
    let v = verbs();
    let mut a = side(&v, "soft0", &o);
    let mut peer = Peer::spawn();
    let (qpn, lid, addr, rkey) = peer.side("soft1");
    connect_to(&a.qp, lid, qpn, &o, 14);
    fill(&mut a, 3);
    let mut sge = a.mr.sge(0, 64).unwrap();
    let mut wr = wr_rdma(
        1,
        IBV_WR_RDMA_WRITE,
        std::slice::from_mut(&mut sge),
        addr,
        rkey,
    );
    post(&a, &mut wr);
    assert!(drain(&a.cq, 150).is_empty());
    let my_lid = a.ctx.query_port(1).unwrap().lid();
    peer.cmd(&format!("connect {my_lid} {}", a.qp.qp_num()));
    let wc = poll_n(&a.cq, 1);
    assert!(wc[0].is_ok(), "{:?}", wc[0]);
    assert_eq!(unhex(&peer.cmd("read 0 64")[0]), bytes(&a)[..64]);
}

/// `IBV_EVENT_QP_ACCESS_ERR`.
const QP_ACCESS_ERR: u32 = 3;

#[test]
fn a_bad_rkey_is_a_remote_access_error() {
    let o = Opts::default();
    let (a, mut peer, (_, _, raddr, rkey)) = connected("soft0", "soft1", &o);
    let mut sge = a.mr.sge(0, 64).unwrap();
    let mut wr = bad_rkey_write(&mut sge, raddr, rkey);
    peer.cmd("recv 2 0 64");
    post(&a, &mut wr);
    let wc = poll_n(&a.cq, 1);
    assert_eq!(wc[0].raw().status, IBV_WC_REM_ACCESS_ERR);
    // The responder, in the other process, went to the error state as ConnectX's does:
    // its QP raised IBV_EVENT_QP_ACCESS_ERR on its context there, and its posted
    // receives were flushed.
    assert_eq!(
        peer.cmd("events"),
        [format!("event {QP_ACCESS_ERR} our-qp")]
    );
    assert_eq!(peer.cmd("state"), ["state Err"]);
    let flushed = peer.cmd("poll 2");
    assert_eq!(
        flushed,
        [
            format!("wc 1000 {IBV_WC_WR_FLUSH_ERR} {IBV_WC_RECV} 0 0"),
            format!("wc 1001 {IBV_WC_WR_FLUSH_ERR} {IBV_WC_RECV} 0 0"),
        ]
    );
}

#[test]
fn a_killed_peer_is_retry_exceeded_within_the_timeout() {
    let o = Opts::default();
    let (a, mut peer, (_, _, raddr, rkey)) = connected("soft0", "soft1", &o);
    let mut sge = a.mr.sge(0, 64).unwrap();
    let mut wr = wr_rdma(
        1,
        IBV_WR_RDMA_WRITE,
        std::slice::from_mut(&mut sge),
        raddr,
        rkey,
    );
    post(&a, &mut wr);
    assert!(poll_n(&a.cq, 1)[0].is_ok());
    peer.kill();
    let t = Instant::now();
    wr.wr_id = 2;
    post(&a, &mut wr);
    wr.wr_id = 3;
    post(&a, &mut wr);
    let wc = poll_n(&a.cq, 2);
    assert_eq!(wc[0].raw().status, IBV_WC_RETRY_EXC_ERR, "{:?}", wc[0]);
    assert_eq!(wc[1].raw().status, IBV_WC_WR_FLUSH_ERR);
    // timeout 14, retry_cnt 7: about 0.54 s.
    assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
}

/// A NIC serves RDMA WRITE and READ without the responder's CPU: both complete, with
/// the data in place, while the responder process is stopped (`SIGSTOP`). The
/// responder's region was registered before its QP existed (as perftest does).
#[test]
fn one_sided_operations_complete_while_the_responder_process_is_stopped() {
    isolate();
    let v = verbs();
    let o = Opts::default();
    let mut a = side(&v, "soft0", &o);
    let mut peer = Peer::spawn();
    let l = peer.cmd("side soft1 mr-first");
    let r: Vec<u64> = l[0].split(' ').map(|x| x.parse().unwrap()).collect();
    let (rqpn, rlid, raddr, rkey) = (r[0] as u32, r[1] as u16, r[2], r[3] as u32);
    let lid = a.ctx.query_port(1).unwrap().lid();
    peer.cmd(&format!("connect {lid} {}", a.qp.qp_num()));
    peer.cmd("fill 9");
    connect_to(&a.qp, rlid, rqpn, &o, 14);
    fill(&mut a, 3);
    peer.signal_stop(true);
    let mut sge = a.mr.sge(0, 300).unwrap();
    let mut wr = wr_rdma(
        1,
        IBV_WR_RDMA_WRITE,
        std::slice::from_mut(&mut sge),
        raddr + 100,
        rkey,
    );
    post(&a, &mut wr);
    let wc = poll_n(&a.cq, 1);
    assert!(wc[0].is_ok(), "{:?}", wc[0]);
    let mut sge = a.mr.sge(8192, 500).unwrap();
    let mut wr = wr_rdma(
        2,
        IBV_WR_RDMA_READ,
        std::slice::from_mut(&mut sge),
        raddr + 4000,
        rkey,
    );
    post(&a, &mut wr);
    let wc = poll_n(&a.cq, 1);
    assert!(wc[0].is_ok(), "{:?}", wc[0]);
    assert_eq!(wc[0].raw().byte_len, 500);
    peer.signal_stop(false);
    let theirs = unhex(&peer.cmd("read 100 300")[0]);
    assert_eq!(theirs, bytes(&a)[..300], "the WRITE landed");
    let theirs = unhex(&peer.cmd("read 4000 500")[0]);
    assert_eq!(
        bytes(&a)[8192..8692],
        theirs[..],
        "the READ brought their bytes"
    );
    peer.signal_stop(true);
    // A stream of large WRITEs (64 KiB each, posted as one chain) is served the
    // same way, each WQE with work still queued behind it.
    let mut sges: Vec<_> = (0..3).map(|_| a.mr.sge(0, 1 << 16).unwrap()).collect();
    let mut wrs: Vec<_> = sges
        .iter_mut()
        .enumerate()
        .map(|(i, sge)| {
            wr_rdma(
                10 + i as u64,
                IBV_WR_RDMA_WRITE,
                std::slice::from_mut(sge),
                raddr,
                rkey,
            )
        })
        .collect();
    for i in 0..2 {
        let next: *mut ibv_send_wr = &mut wrs[i + 1];
        wrs[i].next = next;
    }
    post(&a, &mut wrs[0]);
    let wcs = poll_n(&a.cq, 3);
    assert!(wcs.iter().all(|w| w.is_ok()), "{wcs:?}");
    peer.signal_stop(false);
    for off in [0, 61440] {
        let theirs = unhex(&peer.cmd(&format!("read {off} 4096"))[0]);
        assert_eq!(theirs, bytes(&a)[off..off + 4096], "the stream landed");
    }
}

/// Once `ibv_dereg_mr` returned in the owner, a WRITE to the region fails with a remote
/// access error, though the same WRITE succeeded just before.
#[test]
fn a_deregistered_region_is_refused_to_other_processes_at_once() {
    let o = Opts::default();
    let (a, mut peer, _) = connected("soft0", "soft1", &o);
    let l = peer.cmd("reg");
    let r: Vec<u64> = l[0].split(' ').map(|x| x.parse().unwrap()).collect();
    let (addr, rkey) = (r[0], r[1] as u32);
    let mut sge = a.mr.sge(0, 64).unwrap();
    let mut wr = wr_rdma(
        1,
        IBV_WR_RDMA_WRITE,
        std::slice::from_mut(&mut sge),
        addr,
        rkey,
    );
    post(&a, &mut wr);
    assert!(poll_n(&a.cq, 1)[0].is_ok());
    peer.cmd("dereg");
    wr.wr_id = 2;
    post(&a, &mut wr);
    let wc = poll_n(&a.cq, 1);
    assert_eq!(wc[0].raw().status, IBV_WC_REM_ACCESS_ERR, "{:?}", wc[0]);
}

/// `(qpn, lid, addr, rkey)` of a child's `side`/`uc`/`ud` answer.
fn parse_side(l: &[String]) -> (u32, u16, u64, u32) {
    let v: Vec<u64> = l[0].split(' ').map(|x| x.parse().unwrap()).collect();
    (v[0] as u32, v[1] as u16, v[2], v[3] as u32)
}

const QKEY: u32 = 0x1111_1111;

/// UD between two processes: a datagram with no receive waiting, or with another
/// Q_Key, is dropped (the sender completes); one that fits arrives behind the GRH area
/// and names its sender.
#[test]
fn datagrams_between_processes_follow_q_keys_and_receives() {
    isolate();
    let v = verbs();
    let mut a = ud_side(&v, "soft0", QKEY);
    fill(&mut a, 4);
    let mut peer = Peer::spawn();
    let (qpn, plid, _, _) = parse_side(&peer.cmd(&format!("ud soft1 {QKEY}")));
    let ah = ah_for(&a.pd, plid, None);
    assert_eq!(
        ud_send(&a, ah, qpn, QKEY, 0, 64),
        vqp_host::WcStatus::Success
    );
    peer.cmd("recv 1 0 200");
    assert_eq!(
        ud_send(&a, ah, qpn, 0x2222, 0, 64),
        vqp_host::WcStatus::Success
    );
    assert_eq!(
        ud_send(&a, ah, qpn, QKEY, 100, 64),
        vqp_host::WcStatus::Success
    );
    assert_eq!(
        peer.cmd("poll 1")[0],
        format!("wc 1000 0 {IBV_WC_RECV} 104 {}", 0xabcd_u32.to_be()),
        "the one with the right Q_Key, 40 + 64 bytes"
    );
    assert_eq!(unhex(&peer.cmd("read 40 64")[0]), bytes(&a)[100..164]);
    // SAFETY: the AH is live and unused now.
    assert_eq!(unsafe { vqp_softverbs::ibv_destroy_ah(ah) }, 0);
}

/// UC between two processes: what the responder cannot take (a bad rkey, a SEND with
/// no receive) is dropped, its QP untouched, the requester successful; the rest lands.
#[test]
fn uc_between_processes_drops_what_the_responder_cannot_take() {
    isolate();
    let v = verbs();
    let mut a = side_of(&v, "soft0", vqp_host::QpType::Uc);
    fill(&mut a, 6);
    let mut peer = Peer::spawn();
    let (qpn, plid, raddr, rkey) = parse_side(&peer.cmd("uc soft1"));
    peer.cmd(&format!("connect_uc {} {}", lid(&a.ctx), a.qp.qp_num()));
    connect_typed(&a.qp, plid, qpn, false);
    let ok = vqp_host::WcStatus::Success;
    let mut sge = a.mr.sge(0, 64).unwrap();
    let mut wr = bad_rkey_write(&mut sge, raddr, rkey);
    assert_eq!(post_status(&a, &mut wr), ok, "a bad rkey: dropped");
    let mut sge = a.mr.sge(0, 16).unwrap();
    let mut wr = send_wr(2, IBV_WR_SEND, std::slice::from_mut(&mut sge));
    assert_eq!(post_status(&a, &mut wr), ok, "no receive: dropped");
    assert_eq!(peer.cmd("state"), ["state Rts"]);
    assert!(peer.cmd("events").is_empty(), "no event at the responder");
    let mut sge = a.mr.sge(500, 256).unwrap();
    let mut wr = wr_rdma(
        3,
        IBV_WR_RDMA_WRITE,
        std::slice::from_mut(&mut sge),
        raddr + 1000,
        rkey,
    );
    assert_eq!(post_status(&a, &mut wr), ok);
    assert_eq!(unhex(&peer.cmd("read 1000 256")[0]), bytes(&a)[500..756]);
    peer.cmd("recv 1 0 64");
    let mut sge = a.mr.sge(300, 32).unwrap();
    let mut wr = send_wr(4, IBV_WR_SEND, std::slice::from_mut(&mut sge));
    assert_eq!(post_status(&a, &mut wr), ok);
    assert_eq!(
        peer.cmd("poll 1")[0],
        format!("wc 1000 0 {IBV_WC_RECV} 32 0")
    );
    assert_eq!(unhex(&peer.cmd("read 0 32")[0]), bytes(&a)[300..332]);
}

/// The namespace directory of a test process is gone once the process has exited: a
/// second copy of this binary runs one test (with a child of its own) and its
/// `vqp-xproc-<pid>` directory must not outlive it.
#[test]
fn the_namespace_directory_is_removed_at_exit() {
    if std::env::var_os(ENV_CHILD).is_some() {
        return;
    }
    let run = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "qp_numbers_are_machine_wide_and_resolve_to_their_process",
            "--test-threads=1",
        ])
        .env_remove(vqp_softverbs::ENV_DIR)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn a copy of the test binary");
    let mut run = run;
    let pid = run.id();
    let deadline = Instant::now() + Duration::from_secs(60);
    while run.try_wait().expect("wait").is_none() {
        if Instant::now() > deadline {
            let _ = run.kill();
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let out = run.wait_with_output().expect("its output");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && text.contains("1 passed"), "{text}");
    let dir = namespace_dir(pid);
    let left = dir.exists();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(!left, "{} was left behind", dir.display());
}

/// The extended verbs across processes: an extended QP and CQ here (`ibv_create_qp_ex`,
/// `ibv_create_cq_ex` with timestamps) against a plain QP in the child; a batch of the
/// `ibv_wr_*` API (WRITE, SEND with immediate, fetch-and-add, READ) reaches the child's
/// memory and receive queue, and its completions come back through `ibv_start_poll`;
/// the child's fetch-adds reach a zero-based region over device memory here.
#[test]
fn the_wr_api_and_an_extended_cq_work_with_a_qp_of_another_process() {
    use xverbs_support as x;
    isolate();
    let flags = IBV_WC_STANDARD_FLAGS | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP;
    let s = x::x_side("soft0", IBV_QPT_RC, flags, x::ALL_OPS);
    let mut peer = Peer::spawn();
    let (pqpn, plid, raddr, rkey) = peer.side("soft1");
    peer.cmd(&format!("connect {} {}", x::lid(&s.ctx), x::qpn(s.qp)));
    x::connect(s.qp, plid, pqpn, IBV_QPT_RC);
    peer.cmd("fill 9");
    peer.cmd("recv 1 60000 64");
    let b0 = unhex(&peer.cmd("read 0 65536")[0]);
    let a = x::buf(&s);
    for (i, v) in a[..4096].iter_mut().enumerate() {
        *v = (i % 251) as u8;
    }
    let w = x::Wr(x::qpx(s.qp));
    w.start();
    w.id(1, IBV_SEND_SIGNALED);
    // SAFETY: the QP's own functions; registered buffers here, the peer's region there.
    unsafe {
        w.q().wr_rdma_write.unwrap()(w.0, rkey, raddr + 1000);
        w.sge(&s.mr, 0, 3000);
        w.id(2, IBV_SEND_SIGNALED);
        w.q().wr_send_imm.unwrap()(w.0, 0x0102_0304u32.to_be());
        w.q().wr_set_inline_data.unwrap()(w.0, b"across".as_ptr() as *mut _, 6);
        w.id(3, IBV_SEND_SIGNALED);
        w.q().wr_atomic_fetch_add.unwrap()(w.0, rkey, raddr + 8, 5);
        w.sge(&s.mr, 8192, 8);
        w.id(4, IBV_SEND_SIGNALED);
        w.q().wr_rdma_read.unwrap()(w.0, rkey, raddr + 20000);
        w.sge(&s.mr, 10000, 100);
    }
    assert_eq!(w.complete(), 0);
    let got = x::poll_ex(s.cq, 4);
    let ops: Vec<_> = got.iter().map(|c| (c.wr_id, c.status, c.opcode)).collect();
    assert_eq!(
        ops,
        [
            (1, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE),
            (2, IBV_WC_SUCCESS, IBV_WC_SEND),
            (3, IBV_WC_SUCCESS, IBV_WC_FETCH_ADD),
            (4, IBV_WC_SUCCESS, IBV_WC_RDMA_READ),
        ]
    );
    assert!(got.iter().all(|c| c.ts > 0) && got.windows(2).all(|p| p[0].ts <= p[1].ts));
    let r = peer.cmd("poll 1");
    assert_eq!(
        r[0],
        format!("wc 1000 0 {IBV_WC_RECV} 6 {}", 0x0102_0304u32.to_be())
    );
    let b = unhex(&peer.cmd("read 0 65536")[0]);
    assert_eq!(&b[1000..4000], &x::buf(&s)[..3000]);
    assert_eq!(&b[60000..60006], b"across");
    let old = u64::from_ne_bytes(b0[8..16].try_into().unwrap());
    assert_eq!(
        u64::from_ne_bytes(b[8..16].try_into().unwrap()),
        old.wrapping_add(5)
    );
    let a = x::buf(&s);
    assert_eq!(u64::from_ne_bytes(a[8192..8200].try_into().unwrap()), old);
    assert_eq!(&a[10000..10100], &b0[20000..20100]);

    // Device memory here, a zero-based region over it, and the child's fetch-adds on
    // it (address 8 of the region: byte 72 of the allocation).
    let c = s.ctx.as_raw();
    let v = x::vctx(c);
    let mut at = ibv_alloc_dm_attr {
        length: 256,
        log_align_req: 0,
        comp_mask: 0,
    };
    // SAFETY: a live context; readable attributes.
    let dm = unsafe { v.alloc_dm.unwrap()(c, &mut at) };
    assert!(!dm.is_null());
    let access = IBV_ACCESS_ZERO_BASED | IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_ATOMIC;
    // SAFETY: a live PD and DM.
    let mr = unsafe { v.reg_dm_mr.unwrap()(s.pd.as_raw(), dm, 64, 128, access) };
    assert!(!mr.is_null());
    // SAFETY: a live MR.
    let dm_rkey = unsafe { (*mr).rkey };
    peer.cmd(&format!("fadd 3 8 {dm_rkey}"));
    let mut word = [0u8; 8];
    // SAFETY: a live DM; an 8-byte buffer.
    assert_eq!(
        unsafe { (*dm).memcpy_from_dm.unwrap()(word.as_mut_ptr().cast(), dm, 72, 8) },
        0
    );
    assert_eq!(u64::from_ne_bytes(word), 3);
    // SAFETY: live objects no longer used.
    unsafe {
        assert_eq!(vqp_softverbs::ibv_dereg_mr(mr), 0);
        assert_eq!(v.free_dm.unwrap()(dm), 0);
    }
}

/// Our side on soft0 connected to a child's on soft1 whose region allows windows.
fn connected_to_windows() -> (Side, Peer, u64) {
    isolate();
    let o = Opts::default();
    let v = verbs();
    let s = side(&v, "soft0", &o);
    let mut peer = Peer::spawn();
    let l = peer.cmd("mwside soft1");
    let f: Vec<u64> = l[0].split(' ').map(|x| x.parse().unwrap()).collect();
    let lid = s.ctx.query_port(1).unwrap().lid();
    peer.cmd(&format!("connect {lid} {}", s.qp.qp_num()));
    connect_to(&s.qp, f[1] as u16, f[0] as u32, &o, 14);
    (s, peer, f[2])
}

/// The child binds a window (`mw TYPE OFF LEN ACCESS`); its key.
fn window(peer: &mut Peer, ty: u32, off: u64, len: u64, access: u32) -> u32 {
    let l = peer.cmd(&format!("mw {ty} {off} {len} {access}"));
    let f: Vec<u32> = l[0].split(' ').map(|x| x.parse().unwrap()).collect();
    assert_eq!(f[0], IBV_WC_SUCCESS, "the bind completed");
    f[1]
}

fn one_sided(a: &Side, op: u32, addr: u64, key: u32) -> vqp_host::WcStatus {
    let mut sge = a.mr.sge(0, 16).unwrap();
    let mut wr = wr_rdma(9, op, std::slice::from_mut(&mut sge), addr, key);
    post(a, &mut wr);
    poll_n(&a.cq, 1)[0].status()
}

#[test]
fn memory_windows_of_another_process_are_checked_as_its_regions() {
    use vqp_host::WcStatus;
    let rw = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
    // A type 2 window: its range, through both the exported keys (a lone WRITE) and
    // the inbox (a READ behind a WRITE); past its end a remote access error.
    let (mut a, mut peer, raddr) = connected_to_windows();
    fill(&mut a, 5);
    let k = window(&mut peer, IBV_MW_TYPE_2, 1000, 512, rw);
    assert_eq!(
        one_sided(&a, IBV_WR_RDMA_WRITE, raddr + 1000, k),
        WcStatus::Success
    );
    assert_eq!(unhex(&peer.cmd("read 1000 16")[0]), &bytes(&a)[..16]);
    let mut sge = a.mr.sge(0, 16).unwrap();
    let mut w1 = wr_rdma(
        1,
        IBV_WR_RDMA_WRITE,
        std::slice::from_mut(&mut sge),
        raddr + 1100,
        k,
    );
    let mut sge2 = a.mr.sge(100, 16).unwrap();
    let mut w2 = wr_rdma(
        2,
        IBV_WR_RDMA_READ,
        std::slice::from_mut(&mut sge2),
        raddr + 1000,
        k,
    );
    w1.next = &mut w2;
    post(&a, &mut w1);
    assert!(poll_n(&a.cq, 2).iter().all(|c| c.is_ok()));
    assert_eq!(&bytes(&a)[100..116], &bytes(&a)[..16]);
    assert_eq!(
        one_sided(&a, IBV_WR_RDMA_WRITE, raddr + 1500, k),
        WcStatus::RemAccessErr
    );
    drop(peer);

    // Invalidated over there (LOCAL_INV): refused here.
    let (a, mut peer, raddr) = connected_to_windows();
    let k = window(&mut peer, IBV_MW_TYPE_2, 0, 4096, rw);
    assert_eq!(
        one_sided(&a, IBV_WR_RDMA_WRITE, raddr, k),
        WcStatus::Success
    );
    assert_eq!(peer.cmd(&format!("inv {k}"))[0], IBV_WC_SUCCESS.to_string());
    assert_eq!(
        one_sided(&a, IBV_WR_RDMA_WRITE, raddr, k),
        WcStatus::RemAccessErr
    );
    drop(peer);

    // Invalidated by our SEND_WITH_INV: the receive over there says so.
    let (a, mut peer, raddr) = connected_to_windows();
    let k = window(&mut peer, IBV_MW_TYPE_2, 0, 4096, rw);
    peer.cmd("recv 1 8192 64");
    let mut sge = a.mr.sge(0, 8).unwrap();
    let mut s = send_wr(3, IBV_WR_SEND_WITH_INV, std::slice::from_mut(&mut sge));
    s.imm.invalidate_rkey = k;
    post(&a, &mut s);
    assert!(poll_n(&a.cq, 1)[0].is_ok());
    assert_eq!(
        peer.cmd("poll 1")[0],
        format!("wc 1000 0 {IBV_WC_RECV} 8 {k}")
    );
    assert_eq!(
        one_sided(&a, IBV_WR_RDMA_WRITE, raddr, k),
        WcStatus::RemAccessErr
    );
    drop(peer);

    // A type 1 window grants its rights only: no READ through a write-only window.
    let (a, mut peer, raddr) = connected_to_windows();
    let k = window(&mut peer, IBV_MW_TYPE_1, 0, 4096, IBV_ACCESS_REMOTE_WRITE);
    assert_eq!(
        one_sided(&a, IBV_WR_RDMA_WRITE, raddr, k),
        WcStatus::Success
    );
    assert_eq!(
        one_sided(&a, IBV_WR_RDMA_READ, raddr, k),
        WcStatus::RemAccessErr
    );
}

#[test]
fn implicit_on_demand_regions_of_another_process_fail_cleanly_where_unmapped() {
    use vqp_host::WcStatus;
    let o = Opts::default();
    let (mut a, mut peer, (_, _, raddr, _)) = connected("soft0", "soft1", &o);
    fill(&mut a, 11);
    let k: u32 = peer.cmd("odp")[0].parse().unwrap();
    // Anywhere mapped over there: a lone WRITE (direct), then a READ behind a WRITE
    // (through the inbox).
    assert_eq!(
        one_sided(&a, IBV_WR_RDMA_WRITE, raddr + 256, k),
        WcStatus::Success
    );
    assert_eq!(unhex(&peer.cmd("read 256 16")[0]), &bytes(&a)[..16]);
    let mut sge = a.mr.sge(0, 16).unwrap();
    let mut w1 = wr_rdma(
        1,
        IBV_WR_RDMA_WRITE,
        std::slice::from_mut(&mut sge),
        raddr + 512,
        k,
    );
    let mut sge2 = a.mr.sge(200, 16).unwrap();
    let mut w2 = wr_rdma(
        2,
        IBV_WR_RDMA_READ,
        std::slice::from_mut(&mut sge2),
        raddr + 256,
        k,
    );
    w1.next = &mut w2;
    post(&a, &mut w1);
    assert!(poll_n(&a.cq, 2).iter().all(|c| c.is_ok()));
    assert_eq!(&bytes(&a)[200..216], &bytes(&a)[..16]);
    // Page 0 is mapped nowhere: a remote access error, and the child lives on.
    assert_eq!(
        one_sided(&a, IBV_WR_RDMA_WRITE, 64, k),
        WcStatus::RemAccessErr
    );
    assert_eq!(peer.cmd("state")[0], "state Err");
    drop(peer);

    // A page of the child's on-demand region without access: a remote access error
    // (the child's side of the copy failed), not a protection error of ours.
    let (a, mut peer, _) = connected("soft0", "soft1", &o);
    let l = peer.cmd("odp-guard");
    let f: Vec<u64> = l[0].split(' ').map(|x| x.parse().unwrap()).collect();
    let (base, k) = (f[0], f[1] as u32);
    assert_eq!(one_sided(&a, IBV_WR_RDMA_WRITE, base, k), WcStatus::Success);
    // Behind a WRITE, so that the READ goes through the child's responder.
    let mut sge = a.mr.sge(0, 16).unwrap();
    let mut w1 = wr_rdma(
        1,
        IBV_WR_RDMA_WRITE,
        std::slice::from_mut(&mut sge),
        base,
        k,
    );
    let mut sge2 = a.mr.sge(100, 16).unwrap();
    let mut w2 = wr_rdma(
        2,
        IBV_WR_RDMA_READ,
        std::slice::from_mut(&mut sge2),
        base + 4096,
        k,
    );
    w1.next = &mut w2;
    post(&a, &mut w1);
    let c = poll_n(&a.cq, 2);
    assert_eq!(
        (c[0].status(), c[1].status()),
        (WcStatus::Success, WcStatus::RemAccessErr)
    );
}
