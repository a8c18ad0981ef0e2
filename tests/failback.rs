//! Fail-back over in-process softverbs: a failed data QP replaced by a fresh pair
//! through vqp-host's three messages (Offer, Answer, Ready), started by either side,
//! with crossing offers settled; the replacement carries traffic again and every
//! message lands whole. SPRAY's notify QP replaced the same way, the messages held
//! meanwhile then reported once. A peer without the capability is refused when it is
//! required.

use std::time::{Duration, Instant};

use vqp::core::split::SplitPolicy;
use vqp::core::{Config, Keys, Mode, Opcode, RecvWr, RestoreError, SendWr, Wc};
use vqp::host::failback::NOTIFY_QP;
use vqp::host::{
    AccessFlags, Capabilities, CardError, Connected, Context, Endpoint, Error, FailBack,
    FailBackError, MemoryRegion, Settings, Verbs,
};
use vqp_softverbs::QpSelector;

type Ep = Endpoint<4, 16, 64, 256, 1, 16>;
type Conn = Connected<4, 16, 64, 256, 1, 16>;

const MSG: u64 = 256 << 10;
const SLOTS: u64 = 8;

fn settings(qp_num: u32) -> Settings {
    settings_in(Mode::Dqplb, qp_num)
}

fn settings_in(mode: Mode, qp_num: u32) -> Settings {
    Settings::new(
        Config {
            split: SplitPolicy::new(16 << 10),
            max_outstanding: 16,
            recv_depth: 16,
            qp_num,
            redispatch: true,
            grace_ns: 5_000_000_000,
            ..Config::new(mode)
        },
        2,
    )
}

/// A on soft0 sending to B on soft1, two data QPs, re-dispatch on.
struct Pair {
    a: Conn,
    b: Conn,
    mr_a: MemoryRegion,
    mr_b: MemoryRegion,
    /// Messages sent so far (their pattern is their number).
    sent: u64,
}

fn pair() -> Pair {
    pair_in(Mode::Dqplb)
}

fn pair_in(mode: Mode) -> Pair {
    // SAFETY: softverbs' table implements the libibverbs ABI.
    let verbs = unsafe { Verbs::from_table(vqp_softverbs::verbs_table()) };
    let open = |dev: &str| Context::open(&verbs, Some(dev)).unwrap();
    let (pa, pb) = (
        open("soft0").alloc_pd().unwrap(),
        open("soft1").alloc_pd().unwrap(),
    );
    let ea = Ep::create(&pa, &settings_in(mode, 0xa), None).unwrap();
    let eb = Ep::create(&pb, &settings_in(mode, 0xb), None).unwrap();
    let (ca, cb) = (ea.card(), eb.card());
    let len = (MSG * SLOTS) as usize;
    Pair {
        a: ea.connect(&cb).unwrap(),
        b: eb.connect(&ca).unwrap(),
        mr_a: pa.register_buffer(len, AccessFlags::ALL_REMOTE).unwrap(),
        mr_b: pb.register_buffer(len, AccessFlags::ALL_REMOTE).unwrap(),
        sent: 0,
    }
}

impl Pair {
    /// Sends `n` messages A → B (WRITE_WITH_IMM), each a pattern of its number, and
    /// waits until both sides reported every one; checks each lands whole, in order.
    fn transfer(&mut self, n: u64) {
        let end = self.sent + n;
        while self.sent < end {
            let first = self.sent;
            let count = SLOTS.min(end - first);
            for id in first..first + count {
                self.post(id);
            }
            self.wait(first, count);
            self.sent += count;
        }
    }

    /// Fills message `id`'s slot with its pattern and posts it (WRITE_WITH_IMM), and
    /// B's receive.
    fn post(&mut self, id: u64) {
        self.post_op(id, Opcode::RDMA_WRITE_WITH_IMM);
    }

    /// As [`Self::post`], with `op`: for a SEND, B's receive takes the message into
    /// the slot a write would have written.
    fn post_op(&mut self, id: u64, op: Opcode) {
        let slot = id % SLOTS;
        // SAFETY: nothing is in flight from this slot (the previous round completed),
        // and the buffer is ours.
        let buf = unsafe {
            std::slice::from_raw_parts_mut(
                self.mr_a.as_ptr().add((slot * MSG) as usize),
                MSG as usize,
            )
        };
        buf.iter_mut()
            .enumerate()
            .for_each(|(i, b)| *b = (i as u64 ^ id) as u8);
        let recv = if op == Opcode::SEND {
            let at = self.mr_b.addr() + slot * MSG;
            RecvWr::data(id, at, MSG as u32, self.mr_b.lkey())
        } else {
            RecvWr::notification(id)
        };
        self.b.vqp.post_recv(&recv).unwrap();
        let wr = SendWr::new(
            id,
            op,
            self.mr_a.addr() + slot * MSG,
            MSG,
            self.mr_b.addr() + slot * MSG,
            Keys::single(self.mr_a.lkey(), self.mr_b.rkey()),
        );
        self.a.vqp.post_send(&wr).unwrap();
    }

    /// Polls both sides until messages `first..first + n` are reported on each,
    /// successfully and in order, and B holds each message's pattern.
    fn wait(&mut self, first: u64, n: u64) {
        let (mut at_a, mut at_b) = (first, first);
        let start = Instant::now();
        let mut out = [Wc::EMPTY; 16];
        while at_a < first + n || at_b < first + n {
            for (side, at) in [(&mut self.a, &mut at_a), (&mut self.b, &mut at_b)] {
                let got = side.vcq.poll(&mut [&mut side.vqp], &mut out).unwrap();
                for wc in &out[..got] {
                    assert!(wc.status.is_ok(), "{wc:?}");
                    assert_eq!(wc.wr_id, *at);
                    *at += 1;
                }
            }
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "A {at_a}, B {at_b} of {first}+{n}: A {:?} / B {:?}",
                self.a.vqp.failover(),
                self.b.vqp.failover()
            );
        }
        for id in first..first + n {
            let slot = id % SLOTS;
            // SAFETY: the message landed (B reported it) and nothing writes it now.
            let got = unsafe {
                std::slice::from_raw_parts(
                    self.mr_b.as_ptr().add((slot * MSG) as usize),
                    MSG as usize,
                )
            };
            let bad = got
                .iter()
                .enumerate()
                .position(|(i, b)| *b != (i as u64 ^ id) as u8);
            assert_eq!(bad, None, "message {id}");
        }
    }

    /// Polls both sides once; nothing may be reported (the messages are held).
    fn poll_held(&mut self) {
        let mut out = [Wc::EMPTY; 16];
        for side in [&mut self.a, &mut self.b] {
            let got = side.vcq.poll(&mut [&mut side.vqp], &mut out).unwrap();
            assert_eq!(got, 0, "reported while held: {:?}", &out[..got]);
        }
    }

    /// Bytes handed to data QP `i` of A so far.
    fn bytes_a(&self, i: usize) -> u64 {
        self.a.vqp.lane_stats(i).unwrap().bytes
    }
}

/// Carries `m` to `to`, returning its answer.
fn deliver(to: &mut Conn, m: FailBack) -> Option<FailBack> {
    to.on_failback(m).unwrap()
}

fn fail(qpn: u32) {
    assert_eq!(vqp_softverbs::fail_qp(QpSelector::QpNum(qpn)), 1);
}

#[test]
fn a_failed_qp_is_replaced_by_the_side_that_lost_it_and_carries_traffic_again() {
    let mut p = pair();
    p.transfer(8);
    fail(p.a.vqp.data_qp_num(1).unwrap());
    p.transfer(8);
    assert!(p.a.vqp.data_qp_failed(1));
    assert_eq!(p.a.vqp.failover().healthy, 1);
    let before = p.bytes_a(1);
    let old = p.a.vqp.data_qp_num(1);
    let offer = p.a.offer_rejoin(1).unwrap();
    assert!(p.a.rejoining(1));
    let answer = deliver(&mut p.b, offer).expect("an answer");
    assert!(
        matches!(answer, FailBack::Answer { lane: 1, .. }),
        "{answer:?}"
    );
    let ready = deliver(&mut p.a, answer).expect("ready");
    assert_eq!(ready, FailBack::Ready { lane: 1 });
    assert_eq!(deliver(&mut p.b, ready), None);
    assert!(!p.a.rejoining(1) && !p.b.rejoining(1));
    assert_ne!(p.a.vqp.data_qp_num(1), old);
    p.transfer(16);
    assert!(p.bytes_a(1) > before, "the replacement carries fragments");
    let (fa, fb) = (p.a.vqp.failover(), p.b.vqp.failover());
    assert_eq!((fa.failovers, fa.restored, fa.healthy), (1, 1, 2));
    assert_eq!((fb.restored, fb.healthy), (1, 2));
}

#[test]
fn either_side_may_start_and_crossing_offers_settle_on_one() {
    let mut p = pair();
    p.transfer(4);
    // B, the receiver, replaces a QP that is healthy on both sides.
    let offer = p.b.offer_rejoin(0).unwrap();
    let answer = deliver(&mut p.a, offer).unwrap();
    let ready = deliver(&mut p.b, answer).unwrap();
    assert_eq!(deliver(&mut p.a, ready), None);
    p.transfer(8);
    // Both offer for QP 1 at once: the lower (QP number, PSN) wins.
    let from_a = p.a.offer_rejoin(1).unwrap();
    let from_b = p.b.offer_rejoin(1).unwrap();
    let at_b = deliver(&mut p.b, from_a);
    let at_a = deliver(&mut p.a, from_b);
    let (answer, to_a) = match (at_a, at_b) {
        (Some(ans), None) => (ans, false),
        (None, Some(ans)) => (ans, true),
        other => panic!("one side answers, the other waits: {other:?}"),
    };
    assert!(matches!(answer, FailBack::Answer { lane: 1, .. }));
    let ready = if to_a {
        deliver(&mut p.a, answer).unwrap()
    } else {
        deliver(&mut p.b, answer).unwrap()
    };
    let last = if to_a {
        deliver(&mut p.b, ready)
    } else {
        deliver(&mut p.a, ready)
    };
    assert_eq!(last, None);
    p.transfer(16);
    assert_eq!(p.a.vqp.failover().healthy, 2);
    assert_eq!(p.a.vqp.failover().restored, 2);
}

#[test]
fn messages_out_of_turn_are_refused_and_change_nothing() {
    let mut p = pair();
    let answer = FailBack::Answer {
        lane: 0,
        qpn: 5,
        seen: 6,
    };
    let e = p.a.on_failback(answer).unwrap_err();
    assert!(
        matches!(e, Error::FailBack(FailBackError::Unexpected { .. })),
        "{e}"
    );
    assert!(e.to_string().contains("not being replaced"), "{e}");
    let e = p.a.on_failback(FailBack::Ready { lane: 9 }).unwrap_err();
    assert!(matches!(
        e,
        Error::FailBack(FailBackError::NoSuchQp {
            lane: 9,
            data_qps: 2
        })
    ));
    p.transfer(4);
    assert_eq!(p.a.vqp.failover().healthy, 2);
}

#[test]
fn a_peer_without_fail_back_is_refused_when_required_and_never_offered_to() {
    // SAFETY: softverbs' table implements the libibverbs ABI.
    let verbs = unsafe { Verbs::from_table(vqp_softverbs::verbs_table()) };
    let ctx = Context::open(&verbs, Some("soft0")).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let mut strict = settings(1);
    strict.fail_back = true;
    let ea = Ep::create(&pd, &strict, None).unwrap();
    assert!(ea.card().required.contains(Capabilities::FAIL_BACK));
    let eb = Ep::create(&pd, &settings(2), None).unwrap();
    let mut old_peer = eb.card();
    old_peer.caps = old_peer.caps.without(Capabilities::FAIL_BACK);
    match ea.connect(&old_peer) {
        Err(Error::Card(CardError::MissingCapabilities(c))) => {
            assert_eq!(c, Capabilities::FAIL_BACK)
        }
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("connected to a peer without fail-back"),
    }
    // Not required: it connects, and fail-back is not offered to it.
    let ea = Ep::create(&pd, &settings(1), None).unwrap();
    let mut a = ea.connect(&old_peer).unwrap();
    let e = a.offer_rejoin(0).unwrap_err();
    assert!(
        matches!(e, Error::FailBack(FailBackError::PeerLacks)),
        "{e}"
    );
}

#[test]
fn a_failed_notify_qp_is_replaced_and_the_messages_it_held_land_once() {
    let mut p = pair_in(Mode::Spray);
    p.transfer(8);
    let old = p.a.vqp.notify_qp_num().unwrap();
    fail(old);
    // Messages posted now move their data; their notifies wait for a notify QP.
    let first = p.sent;
    for id in first..first + 4 {
        p.post(id);
    }
    let start = Instant::now();
    let mut offer = None;
    while offer.is_none() {
        assert!(start.elapsed() < Duration::from_secs(10), "A never drained");
        p.poll_held();
        match p.a.offer_rejoin(NOTIFY_QP.into()) {
            Ok(m) => offer = Some(m),
            // Its receives are still flushing, or it has not seen the failure yet.
            Err(Error::Restore(RestoreError::NotDrained)) => {}
            Err(e) => panic!("{e}"),
        }
    }
    assert!(p.a.vqp.notify_qp_failed());
    let offer = offer.unwrap();
    assert!(
        matches!(
            offer,
            FailBack::Offer {
                lane: NOTIFY_QP,
                seen: 0,
                ..
            }
        ),
        "A's notify QP received nothing: {offer:?}"
    );
    // B's notify QP still runs: it is taken out, and the offer refused until its
    // receives flushed; A offers again.
    let mut reply = deliver(&mut p.b, offer).unwrap();
    assert_eq!(reply, FailBack::Refuse { lane: NOTIFY_QP });
    assert!(p.b.vqp.notify_qp_failed());
    while let FailBack::Refuse { .. } = reply {
        assert!(start.elapsed() < Duration::from_secs(10), "B never drained");
        assert_eq!(deliver(&mut p.a, reply), None);
        p.poll_held();
        reply = deliver(&mut p.b, p.a.offer_rejoin(NOTIFY_QP.into()).unwrap()).unwrap();
    }
    // B received A's first 8 notifies on the old QP: A posts the other 4 again.
    assert!(
        matches!(
            reply,
            FailBack::Answer {
                lane: NOTIFY_QP,
                seen: 8,
                ..
            }
        ),
        "{reply:?}"
    );
    let ready = deliver(&mut p.a, reply).unwrap();
    assert_eq!(ready, FailBack::Ready { lane: NOTIFY_QP });
    assert_eq!(deliver(&mut p.b, ready), None);
    assert!(!p.a.rejoining(NOTIFY_QP.into()) && !p.b.rejoining(NOTIFY_QP.into()));
    assert_ne!(p.a.vqp.notify_qp_num(), Some(old));
    p.wait(first, 4);
    p.sent += 4;
    p.transfer(16);
    let (fa, fb) = (p.a.vqp.failover(), p.b.vqp.failover());
    assert_eq!((fa.failovers, fa.restored, fa.healthy), (1, 1, 2));
    assert_eq!((fb.failovers, fb.restored), (1, 1));
}

#[test]
fn sends_in_flight_on_a_failed_data_qp_0_land_once_after_its_replacement() {
    let mut p = pair_in(Mode::Spray);
    for id in 0..4 {
        p.post_op(id, Opcode::SEND);
    }
    p.wait(0, 4);
    p.sent = 4;
    // SENDs pass through data QP 0. These reach it after it failed: they flush,
    // and wait for its replacement (the virtual QP has a grace period).
    fail(p.a.vqp.data_qp_num(0).unwrap());
    let first = p.sent;
    for id in first..first + 4 {
        p.post_op(id, Opcode::SEND);
    }
    let start = Instant::now();
    let offer = loop {
        assert!(start.elapsed() < Duration::from_secs(10), "A never drained");
        p.poll_held();
        match p.a.offer_rejoin(0) {
            Ok(m) => break m,
            Err(Error::Restore(RestoreError::NotDrained)) => {}
            Err(e) => panic!("{e}"),
        }
    };
    assert!(
        matches!(
            offer,
            FailBack::Offer {
                lane: 0,
                seen: 0,
                ..
            }
        ),
        "{offer:?}"
    );
    // B's data QP 0 still runs, with B's receives for the held SENDs posted: it is
    // taken out, and the offer refused until they flushed.
    let mut reply = deliver(&mut p.b, offer).unwrap();
    assert_eq!(reply, FailBack::Refuse { lane: 0 });
    while let FailBack::Refuse { .. } = reply {
        assert!(start.elapsed() < Duration::from_secs(10), "B never drained");
        assert_eq!(deliver(&mut p.a, reply), None);
        p.poll_held();
        reply = deliver(&mut p.b, p.a.offer_rejoin(0).unwrap()).unwrap();
    }
    // B received the first 4 SENDs on the old QP: A posts the other 4 again, and B
    // its 4 receives that flushed.
    assert!(
        matches!(
            reply,
            FailBack::Answer {
                lane: 0,
                seen: 4,
                ..
            }
        ),
        "{reply:?}"
    );
    let ready = deliver(&mut p.a, reply).unwrap();
    assert_eq!(deliver(&mut p.b, ready), None);
    p.wait(first, 4);
    p.sent += 4;
    p.transfer(8);
    let (fa, fb) = (p.a.vqp.failover(), p.b.vqp.failover());
    assert_eq!((fa.failovers, fa.restored, fa.healthy), (1, 1, 2));
    assert_eq!((fb.failovers, fb.restored, fb.healthy), (1, 1, 2));
}
