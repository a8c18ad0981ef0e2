//! SPRAY over two devices per side, in-process softverbs: soft0's link goes down,
//! taking data QP 0 and the notify QP of both sides. Fail-back puts the notify QP's
//! replacement on soft1, where data QP 1 still runs, so messages go on — their notifies
//! included — while soft0 is down. (A test binary of its own: the link is the whole
//! process's.)

use std::time::{Duration, Instant};

use vqp::core::split::SplitPolicy;
use vqp::core::{Config, Keys, Mode, Opcode, RecvWr, RestoreError, SendWr, Wc};
use vqp::host::failback::{notify_lane, NOTIFY_QP};
use vqp::host::{
    AccessFlags, Connected, Context, Endpoint, Error, FailBack, MemoryRegion, Settings, Verbs,
};

type Ep = Endpoint<4, 16, 64, 256, 2, 16>;
type Conn = Connected<4, 16, 64, 256, 2, 16>;

const MSG: usize = 64 << 10;

fn settings(qp_num: u32) -> Settings {
    Settings::new(
        Config {
            split: SplitPolicy::new(16 << 10),
            max_outstanding: 16,
            recv_depth: 16,
            qp_num,
            redispatch: true,
            grace_ns: 10_000_000_000,
            ..Config::new(Mode::Spray)
        },
        2,
    )
}

/// One side: its connection and its buffer, registered on both devices.
struct Side {
    conn: Conn,
    mr: MemoryRegion,
    more: MemoryRegion,
}

/// Polls both sides once; returns what each reported.
fn poll(a: &mut Side, b: &mut Side) -> (Vec<Wc>, Vec<Wc>) {
    let mut got = (Vec::new(), Vec::new());
    let mut out = [Wc::EMPTY; 16];
    for (side, into) in [(&mut *a, &mut got.0), (&mut *b, &mut got.1)] {
        let c = &mut side.conn;
        let n = c.vcq.poll(&mut [&mut c.vqp], &mut out).unwrap();
        into.extend_from_slice(&out[..n]);
    }
    got
}

/// Message `id` A → B (WRITE_WITH_IMM of a pattern of its number), and B's receive.
fn post(a: &mut Side, b: &mut Side, id: u64) {
    // SAFETY: nothing is in flight from A's buffer (the previous message completed).
    let buf = unsafe { std::slice::from_raw_parts_mut(a.mr.as_ptr(), MSG) };
    buf.iter_mut()
        .enumerate()
        .for_each(|(i, x)| *x = (i as u64 ^ id) as u8);
    b.conn.vqp.post_recv(&RecvWr::notification(id)).unwrap();
    let keys = Keys::none()
        .with(0, a.mr.lkey(), b.mr.rkey())
        .with(1, a.more.lkey(), b.more.rkey());
    let wr = SendWr::new(
        id,
        Opcode::RDMA_WRITE_WITH_IMM,
        a.mr.addr(),
        MSG as u64,
        b.mr.addr(),
        keys,
    );
    a.conn.vqp.post_send(&wr).unwrap();
}

/// Polls until message `id` is reported on both sides, successfully, and B holds it.
fn landed(a: &mut Side, b: &mut Side, id: u64) {
    let start = Instant::now();
    let (mut at_a, mut at_b) = (false, false);
    while !(at_a && at_b) {
        let (ea, eb) = poll(a, b);
        for wc in ea.iter().chain(&eb) {
            assert!(wc.status.is_ok() && wc.wr_id == id, "{wc:?}");
        }
        at_a |= !ea.is_empty();
        at_b |= !eb.is_empty();
        assert!(start.elapsed() < Duration::from_secs(10), "message {id}");
    }
    // SAFETY: the message landed and nothing writes B's buffer now.
    let got = unsafe { std::slice::from_raw_parts(b.mr.as_ptr(), MSG) };
    let bad = got
        .iter()
        .enumerate()
        .position(|(i, x)| *x != (i as u64 ^ id) as u8);
    assert_eq!(bad, None, "message {id}");
}

#[test]
fn a_notify_qp_moves_off_a_device_whose_link_went_down() {
    // SAFETY: softverbs' table implements the libibverbs ABI.
    let verbs = unsafe { Verbs::from_table(vqp_softverbs::verbs_table()) };
    let pd = |dev: &str| {
        Context::open(&verbs, Some(dev))
            .unwrap()
            .alloc_pd()
            .unwrap()
    };
    let (a0, a1, b0, b1) = (pd("soft0"), pd("soft1"), pd("soft0"), pd("soft1"));
    let ea = Ep::create_on(&[&a0, &a1], &settings(0xa), &[]).unwrap();
    let eb = Ep::create_on(&[&b0, &b1], &settings(0xb), &[]).unwrap();
    let (ca, cb) = (ea.card(), eb.card());
    let side =
        |ep: Ep, card, p0: &vqp::host::ProtectionDomain, p1: &vqp::host::ProtectionDomain| {
            let mr = p0.register_buffer(MSG, AccessFlags::ALL_REMOTE).unwrap();
            // SAFETY: `mr`'s memory, which outlives this registration (dropped first).
            let more =
                unsafe { p1.register_raw(mr.as_ptr(), MSG, AccessFlags::ALL_REMOTE) }.unwrap();
            Side {
                conn: ep.connect(&card).unwrap(),
                mr,
                more,
            }
        };
    let mut a = side(ea, cb, &a0, &a1);
    let mut b = side(eb, ca, &b0, &b1);
    assert_eq!(a.conn.vqp.notify_qp_device(), Some(0));
    post(&mut a, &mut b, 0);
    landed(&mut a, &mut b, 0);

    vqp_softverbs::set_link(0, false).unwrap();
    // Its data goes over data QP 1; its notify fails on soft0 and waits.
    post(&mut a, &mut b, 1);
    let start = Instant::now();
    let offer = loop {
        assert!(start.elapsed() < Duration::from_secs(10), "A never drained");
        let (ea, eb) = poll(&mut a, &mut b);
        assert!(ea.is_empty() && eb.is_empty(), "reported while held");
        match a.conn.offer_rejoin(NOTIFY_QP.into()) {
            Ok(m) => break m,
            Err(Error::Restore(RestoreError::NotDrained)) => {}
            Err(e) => panic!("{e}"),
        }
    };
    // A's replacement is on its port 1: soft0's is down.
    assert!(
        matches!(offer, FailBack::Offer { lane, .. } if lane == notify_lane(1)),
        "{offer:?}"
    );
    let mut reply = b.conn.on_failback(offer).unwrap().unwrap();
    while let FailBack::Refuse { .. } = reply {
        assert!(start.elapsed() < Duration::from_secs(10), "B never drained");
        assert_eq!(a.conn.on_failback(reply).unwrap(), None);
        let _ = poll(&mut a, &mut b);
        let offer = a.conn.offer_rejoin(NOTIFY_QP.into()).unwrap();
        reply = b.conn.on_failback(offer).unwrap().unwrap();
    }
    assert!(
        matches!(reply, FailBack::Answer { lane, seen: 1, .. } if lane == notify_lane(1)),
        "{reply:?}"
    );
    let ready = a.conn.on_failback(reply).unwrap().unwrap();
    assert_eq!(ready, FailBack::Ready { lane: NOTIFY_QP });
    assert_eq!(b.conn.on_failback(ready).unwrap(), None);
    assert_eq!(a.conn.vqp.notify_qp_device(), Some(1));
    assert_eq!(b.conn.vqp.notify_qp_device(), Some(1));
    // Message 1's notify goes again on soft1; more follow, soft0 still down.
    landed(&mut a, &mut b, 1);
    for id in 2..6 {
        post(&mut a, &mut b, id);
        landed(&mut a, &mut b, id);
    }
    assert!(a.conn.vqp.data_qp_failed(0));
    vqp_softverbs::set_link(0, true).unwrap();
}
