//! vqp-core's physical QP/CQ over verbs, and virtual QPs built by `Endpoint`, driven
//! through softverbs behind the recording layer of `spy/`.

mod spy;

use std::time::{Duration, Instant};

use vqp_core::split::SplitPolicy;
use vqp_core::{
    Config, Keys, Mode, Opcode, PhysCq, PhysQp, PhysWc, PostFailure, RecvWqe, RecvWr, SendFlags,
    SendWqe, SendWr, Wc, WcOpcode, WcStatus,
};
use vqp_host::connect::{self, Address, Path, INIT_MASK, RTR_MASK, RTS_MASK};
use vqp_host::sys::*;
use vqp_host::{
    AccessFlags, CardError, Connected, Context, Endpoint, Error, MemoryRegion, QpCap, QpInit,
    Settings, VerbsCq, VerbsQp,
};

fn cap() -> QpCap {
    QpCap {
        max_send_wr: 32,
        max_recv_wr: 32,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    }
}

/// Two RC QPs on one CQ each, connected to each other.
struct Pair {
    a: VerbsQp,
    b: VerbsQp,
    cq_a: VerbsCq,
    cq_b: VerbsCq,
    mr: MemoryRegion,
}

fn pair(chain: usize) -> Pair {
    let ctx = Context::open(&spy::verbs(), None).unwrap();
    let lid = ctx.query_port(1).unwrap().lid();
    let pd = ctx.alloc_pd().unwrap();
    let (ca, cb) = (
        ctx.create_cq(64, None, 0).unwrap(),
        ctx.create_cq(64, None, 0).unwrap(),
    );
    let qa = pd.create_qp(&QpInit::rc(&ca, cap())).unwrap();
    let qb = pd.create_qp(&QpInit::rc(&cb, cap())).unwrap();
    let (na, nb) = (qa.qp_num(), qb.qp_num());
    connect::connect(&qa, &Path::new(1, Address::lid(lid), nb, 1, 2)).unwrap();
    connect::connect(&qb, &Path::new(1, Address::lid(lid), na, 2, 1)).unwrap();
    let mr = pd
        .register_buffer(1 << 16, AccessFlags::ALL_REMOTE)
        .unwrap();
    Pair {
        a: VerbsQp::with_chain(qa, chain, chain),
        b: VerbsQp::with_chain(qb, chain, chain),
        cq_a: VerbsCq::with_batch(ca, 4),
        cq_b: VerbsCq::new(cb),
        mr,
    }
}

/// Polls until `n` completions came (or a few seconds passed), then once more.
fn poll_n(cq: &mut VerbsCq, n: usize) -> Vec<PhysWc> {
    let mut all = Vec::new();
    let start = Instant::now();
    while all.len() < n && start.elapsed() < Duration::from_secs(10) {
        all.extend(poll_all(cq));
    }
    all.extend(poll_all(cq));
    all
}

fn poll_all(cq: &mut VerbsCq) -> Vec<PhysWc> {
    let mut out = [PhysWc::EMPTY; 3];
    let mut all = Vec::new();
    loop {
        let n = cq.poll(&mut out).unwrap();
        if n == 0 {
            return all;
        }
        assert!(n <= 3, "never more than the caller's buffer");
        all.extend_from_slice(&out[..n]);
    }
}

fn write(p: &Pair, wr_id: u64, src: usize, dst: usize, len: u32) -> SendWqe {
    SendWqe {
        wr_id,
        opcode: Opcode::RDMA_WRITE,
        flags: SendFlags::SIGNALED,
        addr: p.mr.addr() + src as u64,
        len,
        lkey: p.mr.lkey(),
        remote_addr: p.mr.addr() + dst as u64,
        rkey: p.mr.rkey(),
        ..SendWqe::default()
    }
}

#[test]
fn a_chain_is_one_post_call_and_completions_convert() {
    let _serial = spy::serial();
    let mut p = pair(16);
    // SAFETY: nothing else touches the buffer while the test writes it.
    unsafe { p.mr.as_mut_slice() }.unwrap()[..4].copy_from_slice(b"abcd");
    let imm = 0x8000_0042u32.to_be();
    // SAFETY: the post contract: a receive without a buffer names no memory.
    unsafe {
        p.b.post_recv(&[RecvWqe {
            wr_id: 90,
            ..RecvWqe::default()
        }])
    }
    .unwrap();
    let chain = [
        write(&p, 1, 0, 100, 4),
        SendWqe {
            flags: SendFlags::NONE,
            ..write(&p, 2, 0, 200, 2)
        },
        SendWqe {
            opcode: Opcode::RDMA_WRITE_WITH_IMM,
            imm_data: imm,
            len: 0, // no scatter/gather entry at all
            ..write(&p, 3, 0, 300, 0)
        },
    ];
    let before = spy::post_calls().0;
    // SAFETY: the post contract: no INLINE, every buffer with the region's keys.
    unsafe { p.a.post_send(&chain) }.unwrap();
    assert_eq!(spy::post_calls().0 - before, 1, "one post for the chain");

    let sends = poll_n(&mut p.cq_a, 2);
    // SAFETY: the writes completed (the last, signaled, completes after the others);
    // nothing writes the buffer now.
    let buf = unsafe { p.mr.as_slice() }.unwrap();
    assert_eq!(&buf[100..104], b"abcd");
    assert_eq!(&buf[200..202], b"ab");

    let ids: Vec<u64> = sends.iter().map(|w| w.wr_id).collect();
    assert_eq!(ids, [1, 3], "the unsignaled WQE produces no completion");
    assert!(sends.iter().all(|w| w.status.is_ok()));
    assert_eq!(sends[0].opcode, WcOpcode::RDMA_WRITE);
    assert_eq!(sends[0].qp_num, p.a.qp_num());
    assert_eq!(sends[0].imm_data, None);

    let recvs = poll_n(&mut p.cq_b, 1);
    assert_eq!(recvs.len(), 1);
    let r = recvs[0];
    assert_eq!(
        (r.wr_id, r.opcode, r.qp_num),
        (90, WcOpcode::RECV_RDMA_WITH_IMM, p.b.qp_num())
    );
    assert_eq!(
        r.imm_data,
        Some(imm),
        "immediate passed through in network order"
    );
    assert_eq!(r.byte_len, 0);
}

#[test]
fn long_chains_go_in_pieces_and_bad_wr_reports_the_prefix() {
    let _serial = spy::serial();
    let mut p = pair(2);
    assert_eq!(p.a.chain_capacity(), (2, 2));
    let wqes: Vec<SendWqe> = (0..5).map(|i| write(&p, i + 1, 0, 64, 8)).collect();
    let before = spy::post_calls().0;
    // SAFETY: the post contract: no INLINE, every buffer with the region's keys.
    unsafe { p.a.post_send(&wqes) }.unwrap();
    assert_eq!(spy::post_calls().0 - before, 3, "5 WQEs in pieces of 2");
    assert_eq!(poll_n(&mut p.cq_a, 5).len(), 5);

    // The recording layer refuses the WR with id 0xbad: the 4th of the chain, in the second piece.
    let mut wqes = wqes;
    wqes[3].wr_id = spy::BAD_WR_ID;
    assert_eq!(
        // SAFETY: as above.
        unsafe { p.a.post_send(&wqes) },
        Err(PostFailure {
            posted: 3,
            errno: libc::EINVAL
        })
    );
    assert_eq!(poll_n(&mut p.cq_a, 3).len(), 3, "the prefix was posted");

    let recvs = [
        RecvWqe::default(),
        RecvWqe {
            wr_id: spy::BAD_WR_ID,
            ..RecvWqe::default()
        },
    ];
    assert_eq!(
        // SAFETY: the post contract: receives without a buffer name no memory.
        unsafe { p.b.post_recv(&recvs) },
        Err(PostFailure {
            posted: 1,
            errno: libc::EINVAL
        })
    );
    // SAFETY: an empty chain names no memory.
    let empty = unsafe { p.a.post_send(&[]) };
    assert_eq!(empty, Ok(()), "an empty chain posts nothing");
}

#[test]
fn set_error_moves_the_qp_to_err_and_flushes() {
    let _serial = spy::serial();
    let mut p = pair(8);
    let recvs: Vec<RecvWqe> = (0..3)
        .map(|i| RecvWqe {
            wr_id: 10 + i,
            addr: p.mr.addr(),
            len: 64,
            lkey: p.mr.lkey(),
        })
        .collect();
    // SAFETY: the post contract: each buffer lies in the region its key names.
    unsafe { p.b.post_recv(&recvs) }.unwrap();
    p.b.set_error();
    assert!(p.b.set_error_failure().is_none());
    assert_eq!(spy::qp_state(p.b.qp_num()), Some(IBV_QPS_ERR));
    let last = *spy::history(p.b.qp_num()).last().unwrap();
    assert_eq!(last, (IBV_QPS_ERR, IBV_QP_STATE), "state alone");
    let flushed = poll_n(&mut p.cq_b, 3);
    assert_eq!(
        flushed.iter().map(|w| w.wr_id).collect::<Vec<_>>(),
        [10, 11, 12]
    );
    assert!(flushed.iter().all(|w| w.status == WcStatus::WR_FLUSH_ERR));

    // A QP not yet ready to send refuses the whole chain.
    let ctx = Context::open(&spy::verbs(), None).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(8, None, 0).unwrap();
    let mut fresh = VerbsQp::new(pd.create_qp(&QpInit::rc(&cq, cap())).unwrap());
    assert_eq!(
        fresh.chain_capacity(),
        (32, 32),
        "sized from the QP's depth"
    );
    // `ENOMEM`, as mlx5's `_mlx5_post_send` answers a QP that has not reached RTS.
    assert_eq!(
        // SAFETY: the post contract: no INLINE, the buffer with the region's keys.
        unsafe { fresh.post_send(&[write(&p, 1, 0, 0, 1)]) },
        Err(PostFailure {
            posted: 0,
            errno: libc::ENOMEM
        })
    );
}

// ---- Endpoint ---------------------------------------------------------------------------

type Ep = Endpoint<4, 16, 64, 256, 1, 16>;
type Side = Connected<4, 16, 64, 256, 1, 16>;

fn settings(mode: Mode, qps: usize) -> Settings {
    let cfg = Config {
        split: SplitPolicy::new(1024),
        max_outstanding: 16,
        recv_depth: 16,
        ..Config::new(mode)
    };
    Settings::new(cfg, qps)
}

/// Two connected sides over softverbs, and a buffer both use.
fn connected(mode: Mode, qps: usize) -> (Side, Side, MemoryRegion) {
    let ctx = Context::open(&spy::verbs(), None).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let a = Ep::create(&pd, &settings(mode, qps), None).unwrap();
    let b = Ep::create(&pd, &settings(mode, qps), None).unwrap();
    let (ca, cb) = (a.card(), b.card());
    assert_eq!(a.cq().capacity() as u64, a.settings().cq_entries_needed());
    let a = a.connect(&cb).unwrap();
    let b = b.connect(&ca).unwrap();
    let mr = pd
        .register_buffer(1 << 16, AccessFlags::ALL_REMOTE)
        .unwrap();
    (a, b, mr)
}

fn poll(side: &mut Side, into: &mut Vec<Wc>) {
    let mut out = [Wc::EMPTY; 8];
    let n = side.vcq.poll(&mut [&mut side.vqp], &mut out).unwrap();
    into.extend_from_slice(&out[..n]);
}

#[test]
fn cards_describe_the_qps_and_connect_walks_every_transition() {
    let _serial = spy::serial();
    let ctx = Context::open(&spy::verbs(), None).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let a = Ep::create(&pd, &settings(Mode::Spray, 3), None).unwrap();
    let card = a.card();
    assert_eq!(card.mode, Mode::Spray);
    assert_eq!(card.data.len(), 3);
    assert!(card.notify.is_some(), "SPRAY with 3 QPs has a notify QP");
    assert_eq!(
        (card.max_frag, card.max_outstanding, card.recv_depth),
        (1024, 16, 16)
    );
    assert_eq!(card.window, 256);
    assert_eq!(card.ports.len(), 1);
    let port = ctx.query_port(1).unwrap();
    assert_eq!(
        (card.ports[0].lid, u32::from(card.ports[0].mtu)),
        (port.lid(), port.active_mtu().bytes().unwrap())
    );
    assert!(card
        .data
        .iter()
        .chain(card.notify.iter())
        .all(|q| q.port == 0));
    assert_eq!(card.init_seq, a.settings().config.send_seq);
    assert!(card.data.iter().all(|q| q.psn < 1 << 24));
    assert_eq!(a.cq().capacity(), 4 * 32);

    let b = Ep::create(&pd, &settings(Mode::Spray, 3), None).unwrap();
    let (ca, cb) = (card, b.card());
    let side = a.connect(&cb).unwrap();
    let _other = b.connect(&ca).unwrap();
    for q in ca.data.iter().chain(ca.notify.iter()) {
        let h = spy::history(q.qpn);
        assert_eq!(
            h,
            [
                (IBV_QPS_INIT, INIT_MASK.bits()),
                (IBV_QPS_RTR, RTR_MASK.bits()),
                (IBV_QPS_RTS, RTS_MASK.bits())
            ],
            "QP {:#x}",
            q.qpn
        );
        assert_eq!(spy::qp_state(q.qpn), Some(IBV_QPS_RTS));
    }
    assert_eq!(side.vqp.data_qps(), 3);
    assert_eq!(side.vqp.data_qp_num(0), Some(ca.data[0].qpn));
    assert_eq!(side.vqp.notify_qp_num(), ca.notify.map(|q| q.qpn));
    assert_eq!(
        side.vqp.recv_seq().get(),
        cb.init_seq,
        "receiver starts at the peer's"
    );
}

#[test]
fn dqplb_receives_are_posted_in_init_before_rtr() {
    let _serial = spy::serial();
    let (a, _b, _mr) = connected(Mode::Dqplb, 4);
    for i in 0..4 {
        let qpn = a.vqp.data_qp_num(i).unwrap();
        let states = spy::recv_states(qpn);
        assert_eq!(states.len(), 16, "recv_depth zero-length receives");
        assert!(states.iter().all(|&s| s == IBV_QPS_INIT), "{states:?}");
        assert_eq!(spy::posted_recvs(qpn), 16);
    }
}

#[test]
fn mismatched_cards_are_refused_before_any_transition() {
    let _serial = spy::serial();
    let ctx = Context::open(&spy::verbs(), None).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let a = Ep::create(&pd, &settings(Mode::Dqplb, 4), None).unwrap();
    let b = Ep::create(&pd, &settings(Mode::Dqplb, 2), None).unwrap();
    let qpn = a.card().data[0].qpn;
    match a.connect(&b.card()) {
        Err(Error::Card(CardError::DataQps { mine: 4, peer: 2 })) => {}
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("connected"),
    }
    assert!(spy::history(qpn).is_empty());

    // Settings vqp-core refuses are refused before anything is created.
    let mut s = settings(Mode::Dqplb, 5);
    assert!(matches!(
        Ep::create(&pd, &s, None),
        Err(Error::Build(vqp_core::BuildError::DataQps { given: 5, .. }))
    ));
    s.data_qps = 4;
    s.config.max_outstanding = 17;
    assert!(matches!(
        Ep::create(&pd, &s, None),
        Err(Error::Build(vqp_core::BuildError::MaxOutstanding { .. }))
    ));
}

type Ep2 = Endpoint<4, 16, 64, 256, 2, 16>;
type Side2 = Connected<4, 16, 64, 256, 2, 16>;

#[test]
fn an_endpoint_over_two_protection_domains_places_qps_round_robin() {
    let _serial = spy::serial();
    // Two contexts on one device stand for two devices (the endpoint only knows a
    // device by the PD's position in the slice).
    let verbs = spy::verbs();
    let (ctx0, ctx1) = (
        Context::open(&verbs, None).unwrap(),
        Context::open(&verbs, None).unwrap(),
    );
    let (pd0, pd1) = (ctx0.alloc_pd().unwrap(), ctx1.alloc_pd().unwrap());
    let s = settings(Mode::Spray, 3);
    let a = Ep2::create_on(&[&pd0, &pd1], &s, &[]).unwrap();
    assert_eq!(a.devices(), 2);
    assert_eq!(
        (0..3).map(|i| a.data_qp_device(i)).collect::<Vec<_>>(),
        [0, 1, 0]
    );
    // Device 0: data QPs 0 and 2 and the notify QP; device 1: data QP 1, and room for
    // the notify QP, which fail-back may move there.
    assert_eq!(a.device_cq(0).unwrap().capacity(), 3 * 32);
    assert_eq!(a.device_cq(1).unwrap().capacity(), 2 * 32);
    assert!(a.device_cq(2).is_none());
    let card = a.card();
    assert_eq!(card.ports.len(), 2);
    assert_eq!(
        card.data.iter().map(|q| q.port).collect::<Vec<_>>(),
        [0, 1, 0]
    );
    assert_eq!(card.notify.map(|q| q.port), Some(0));
    let bytes = card.to_bytes().unwrap();
    assert_eq!(vqp_host::Card::decode(&bytes).unwrap(), card);

    // A one-device peer would pair its device with both of ours: refused, untouched.
    let one = Ep2::create(&pd0, &s, None).unwrap();
    let qpn = card.data[1].qpn;
    match a.connect(&one.card()) {
        Err(Error::Card(CardError::DevicePairing { qp: 1, .. })) => {}
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("connected"),
    }
    assert!(spy::history(qpn).is_empty());

    // Two devices facing two: connects; a write with keys for both devices lands.
    let a = Ep2::create_on(&[&pd0, &pd1], &s, &[]).unwrap();
    let b = Ep2::create_on(&[&pd0, &pd1], &s, &[]).unwrap();
    let (ca, cb) = (a.card(), b.card());
    let mut a: Side2 = a.connect(&cb).unwrap();
    let mut b: Side2 = b.connect(&ca).unwrap();
    assert_eq!(a.device_cq(1).unwrap().capacity(), 2 * 32);
    assert!(a.device_cq(2).is_none());
    let mut mr = pd0
        .register_buffer(1 << 16, AccessFlags::ALL_REMOTE)
        .unwrap();
    // Device 1's region covers the same buffer, so a fragment on either device finds
    // its data under that device's keys.
    // SAFETY: `mr` (declared before `mr1`, so dropped after it) keeps the buffer alive
    // and in place while `mr1` lives.
    let mr1 = unsafe { pd1.register_raw(mr.as_ptr(), mr.len(), AccessFlags::ALL_REMOTE) }.unwrap();
    let len = 5000;
    fill(&mut mr, 0, len, 9);
    // The request is refused without device 1's keys and accepted with both devices'.
    let keys = Keys::single(mr.lkey(), mr.rkey());
    let wr = SendWr::new(
        1,
        Opcode::RDMA_WRITE_WITH_IMM,
        mr.addr(),
        len as u64,
        mr.addr() + 20_000,
        keys,
    );
    assert!(a.vqp.post_send(&wr).is_err(), "device 1's keys are missing");
    let wr = SendWr {
        keys: keys.with(1, mr1.lkey(), mr1.rkey()),
        ..wr
    };
    b.vqp.post_recv(&RecvWr::notification(7)).unwrap();
    a.vqp.post_send(&wr).unwrap();
    let (mut sa, mut sb) = (Vec::new(), Vec::new());
    let start = Instant::now();
    while (sa.is_empty() || sb.is_empty()) && start.elapsed() < Duration::from_secs(10) {
        poll2(&mut a, &mut sa);
        poll2(&mut b, &mut sb);
    }
    assert_eq!(sa.len(), 1);
    assert_eq!((sa[0].wr_id, sa[0].status), (1, WcStatus::SUCCESS));
    assert_eq!((sb.len(), sb[0].wr_id), (1, 7));
    // SAFETY: everything completed; nothing writes the buffer now.
    let buf = unsafe { mr.as_slice() }.unwrap();
    assert_eq!(&buf[20_000..20_000 + len], &buf[..len], "data landed");

    // Arguments that cannot work are refused before anything is created.
    let refused = |r: vqp_host::Result<Ep2>, what: &str| match r {
        Err(Error::InvalidArgument { what: w }) => assert!(w.contains(what), "{w}"),
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("created"),
    };
    refused(Ep2::create_on(&[], &s, &[]), "at least one");
    refused(Ep2::create_on(&[&pd0, &pd1, &pd0], &s, &[]), "DEVS");
    refused(
        Ep2::create_on(&[&pd0, &pd1], &settings(Mode::Dqplb, 1), &[]),
        "no data QP",
    );
    let (ch0, ch1) = (
        ctx0.create_comp_channel().unwrap(),
        ctx1.create_comp_channel().unwrap(),
    );
    refused(Ep2::create_on(&[&pd0, &pd1], &s, &[&ch0]), "one per");
    assert!(Ep2::create_on(&[&pd0, &pd1], &s, &[&ch0, &ch1]).is_ok());
}

fn poll2(side: &mut Side2, into: &mut Vec<Wc>) {
    let mut out = [Wc::EMPTY; 8];
    let n = side.vcq.poll(&mut [&mut side.vqp], &mut out).unwrap();
    into.extend_from_slice(&out[..n]);
}

fn fill(mr: &mut MemoryRegion, at: usize, len: usize, seed: u8) {
    // SAFETY: no request is outstanding on the buffer while the test writes it.
    let buf = unsafe { mr.as_mut_slice() }.unwrap();
    for (i, b) in buf[at..at + len].iter_mut().enumerate() {
        *b = (i as u8).wrapping_mul(31).wrapping_add(seed);
    }
}

fn run(mode: Mode, qps: usize, imm: u32) {
    let (mut a, mut b, mut mr) = connected(mode, qps);
    let len = 10_000;
    fill(&mut mr, 0, len, 5);
    let keys = Keys::single(mr.lkey(), mr.rkey());
    b.vqp.post_recv(&RecvWr::notification(77)).unwrap();
    let wr = SendWr::new(
        1,
        Opcode::RDMA_WRITE_WITH_IMM,
        mr.addr(),
        len as u64,
        mr.addr() + 20_000,
        keys,
    )
    .imm(imm);
    a.vqp.post_send(&wr).unwrap();
    let (mut sa, mut sb) = (Vec::new(), Vec::new());
    let start = Instant::now();
    while (sa.is_empty() || sb.is_empty()) && start.elapsed() < Duration::from_secs(10) {
        poll(&mut a, &mut sa);
        poll(&mut b, &mut sb);
    }
    // SAFETY: everything completed; nothing writes the buffer now.
    let buf = unsafe { mr.as_slice() }.unwrap();
    assert_eq!(&buf[20_000..20_000 + len], &buf[..len], "data landed");
    assert_eq!(sa.len(), 1);
    assert_eq!(
        (sa[0].wr_id, sa[0].status, sa[0].byte_len),
        (1, WcStatus::SUCCESS, len as u64)
    );
    assert_eq!(sb.len(), 1);
    assert_eq!(sb[0].wr_id, 77);
    assert!(sb[0].status.is_ok(), "{}", sb[0].status);
    assert_eq!(sb[0].opcode, WcOpcode::RECV_RDMA_WITH_IMM);
    if mode == Mode::Spray {
        assert_eq!(
            sb[0].imm_data,
            Some(imm),
            "SPRAY carries the user's immediate"
        );
    }
    assert_eq!(spy::poll_errors(), 0, "no CQ overflowed");
}

#[test]
fn dqplb_write_with_imm_round_trips_across_four_qps() {
    let _serial = spy::serial();
    run(Mode::Dqplb, 4, 0);
}

#[test]
fn spray_write_with_imm_round_trips_with_the_users_immediate() {
    let _serial = spy::serial();
    run(Mode::Spray, 3, 0x1234_5678u32.to_be());
}

#[test]
fn single_qp_passes_through() {
    let _serial = spy::serial();
    run(Mode::Dqplb, 1, 0);
}

#[test]
fn shut_down_flushes_through_the_verbs_provider() {
    let _serial = spy::serial();
    let (mut a, _b, _mr) = connected(Mode::Dqplb, 4);
    a.vqp.post_recv(&RecvWr::notification(5)).unwrap();
    a.vqp.shut_down();
    for i in 0..4 {
        assert_eq!(
            spy::qp_state(a.vqp.data_qp_num(i).unwrap()),
            Some(IBV_QPS_ERR)
        );
    }
    let mut got = Vec::new();
    let start = Instant::now();
    while got.is_empty() && start.elapsed() < Duration::from_secs(10) {
        poll(&mut a, &mut got);
    }
    for _ in 0..10 {
        poll(&mut a, &mut got);
    }
    assert_eq!(got.len(), 1, "the notification receive is reported once");
    assert_eq!(got[0].wr_id, 5);
    assert!(!got[0].status.is_ok());
    assert_eq!(a.vqp.recvs_in_flight(), 0);
}
