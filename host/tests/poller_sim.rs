//! Poll threads over the simulated NIC: the providers are built inside the thread by a
//! `Send` factory (vqp-sim's handles are `Rc`-based and stay on that thread).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use vqp_core::split::SplitPolicy;
use vqp_core::{
    Config, Keys, Mode, Opcode, PhysCq, PhysQp, PhysWc, PollFailure, PostSendError, RecvWr, SendWr,
    VirtualCq, VirtualQp, WcOpcode, WcStatus,
};
use vqp_host::{Error, Event, Handle, Idle, PollThread, PollerConfig, Refusal, Stack};
use vqp_sim::{Access, Nic, NicConfig, QpCaps, QpState, ReorderPolicy, SimCq, SimQp};

const QPS: usize = 4;
/// Slots per direction of each virtual QP: small, so that backpressure happens.
const SLOTS: usize = 32;
type Vqp = VirtualQp<SimQp, QPS, 8, SLOTS, 128>;
type Vcq = VirtualCq<SteppingCq, 1, 32>;
type SimStack = Stack<SimQp, SteppingCq, QPS, 8, SLOTS, 128, 1, 32>;

/// The simulated CQ, stepping the NIC before each poll (the simulated NIC only moves
/// when driven). Steps only once `go` is set or the watched QP is in error (so a test
/// can hold all traffic back, and an abort's flush still runs). On drop — at the end of
/// the poll thread — it sends the destination buffer's bytes to the test.
struct SteppingCq {
    cq: SimCq,
    nic: Nic,
    go: Arc<AtomicBool>,
    watch: u32,
    dump: Option<(mpsc::Sender<Vec<u8>>, u64, usize)>,
}

impl PhysCq for SteppingCq {
    fn poll(&mut self, out: &mut [PhysWc]) -> Result<usize, PollFailure> {
        if self.go.load(Ordering::Relaxed) || self.nic.qp_state(self.watch) == Ok(QpState::Error) {
            self.nic.run_for(16);
        }
        self.cq.poll(out)
    }
}

impl Drop for SteppingCq {
    fn drop(&mut self) {
        if let Some((tx, addr, len)) = self.dump.take() {
            let _ = tx.send(self.nic.read_vec(addr, len).expect("mapped"));
        }
    }
}

/// Addresses and keys the application needs, sent back by the factory.
#[derive(Clone, Copy, Debug)]
struct Buffers {
    src: u64,
    dst: u64,
    keys: Keys,
}

const LEN: usize = 1 << 20;

fn pattern() -> Vec<u8> {
    (0..LEN)
        .map(|i| (i % 251) as u8 ^ (i >> 12) as u8)
        .collect()
}

fn config(qp_num: u32) -> Config {
    Config {
        split: SplitPolicy::new(4096),
        max_outstanding: 8,
        recv_depth: 8,
        qp_num,
        ..Config::new(Mode::Dqplb)
    }
}

/// Sender (virtual QP 1, index 0) and receiver (virtual QP 2, index 1) on one NIC and
/// one virtual CQ.
fn factory(
    go: Arc<AtomicBool>,
    buffers: mpsc::Sender<Buffers>,
    dump: mpsc::Sender<Vec<u8>>,
) -> impl FnOnce() -> vqp_host::Result<SimStack> + Send + 'static {
    move || {
        let nic = Nic::new(NicConfig {
            policy: ReorderPolicy::Random,
            seed: 7,
            ..NicConfig::default()
        });
        let caps = QpCaps {
            max_send_wr: 8,
            max_recv_wr: 8,
        };
        let cq_len = 2 * QPS * 16;
        let cq = nic.create_cq(0, cq_len).expect("cq");
        let a: Vec<SimQp> = (0..QPS)
            .map(|_| nic.create_qp(0, &cq, &cq, caps).expect("qp"))
            .collect();
        let b: Vec<SimQp> = (0..QPS)
            .map(|_| nic.create_qp(0, &cq, &cq, caps).expect("qp"))
            .collect();
        for (x, y) in a.iter().zip(&b) {
            nic.connect(x, y).expect("connect");
        }
        let src = nic.alloc_mr(0, LEN, Access::ALL).expect("mr");
        let dst = nic.alloc_mr(0, LEN, Access::ALL).expect("mr");
        nic.write(src.addr, &pattern()).expect("write");
        let watch = a[0].qp_num();
        let mut va = Vqp::new(config(1), a.into_iter().map(|q| (q, 0)), None).expect("vqp");
        let mut vb = Vqp::new(config(2), b.into_iter().map(|q| (q, 0)), None).expect("vqp");
        let mut vcq = Vcq::new();
        let stepping = SteppingCq {
            cq,
            nic,
            go,
            watch,
            dump: Some((dump, dst.addr, LEN)),
        };
        vcq.add_cq(stepping, 0, cq_len as u32).expect("cq");
        vcq.attach(&mut va).expect("attach");
        vcq.attach(&mut vb).expect("attach");
        vb.arm_receiver();
        buffers
            .send(Buffers {
                src: src.addr,
                dst: dst.addr,
                keys: Keys::single(src.lkey, dst.rkey),
            })
            .expect("test waits");
        Ok(Stack::new(vcq, vec![va, vb]))
    }
}

struct Rig<const R: usize> {
    poller: PollThread<R>,
    a: Handle<R>,
    b: Handle<R>,
    go: Arc<AtomicBool>,
    bufs: Buffers,
    dump: mpsc::Receiver<Vec<u8>>,
}

fn rig<const R: usize>(cfg: PollerConfig) -> Rig<R> {
    let go = Arc::new(AtomicBool::new(false));
    let (btx, brx) = mpsc::channel();
    let (dtx, drx) = mpsc::channel();
    let (poller, mut handles) =
        PollThread::<R>::spawn(cfg, 2, factory(Arc::clone(&go), btx, dtx)).unwrap();
    let b = handles.pop().unwrap();
    let a = handles.pop().unwrap();
    assert_eq!((a.index(), b.index()), (0, 1));
    Rig {
        poller,
        a,
        b,
        go,
        bufs: brx.recv().unwrap(),
        dump: drx,
    }
}

/// Message `i`: its offset and length (1 byte to 12 KiB, so 1 to 3 fragments; 120
/// messages fit the 1 MiB buffers).
fn messages(n: usize) -> Vec<(u64, u64)> {
    let mut off = 0;
    let msgs: Vec<(u64, u64)> = (0..n)
        .map(|i| {
            let len = 1 + (i as u64 * 7919) % 12_000;
            let m = (off, len);
            off += len;
            m
        })
        .collect();
    assert!(off <= LEN as u64, "messages fit the buffers");
    msgs
}

fn write(bufs: &Buffers, i: usize, (off, len): (u64, u64)) -> SendWr {
    SendWr::new(
        i as u64,
        Opcode::RDMA_WRITE_WITH_IMM,
        bufs.src + off,
        len,
        bufs.dst + off,
        bufs.keys,
    )
}

/// How far the sender may run ahead of the receive events the application took. A
/// DQPLB receiver holds at most `SLOTS` messages no receive waited for; beyond that
/// its virtual QP fails (a protocol error), so the application flow-controls, as it
/// would over verbs.
const CREDIT: usize = SLOTS + 2;

/// Submits `n` writes on `a` and `n` notification receives on `b`, retrying when a
/// ring is full, and collects every event, until each request has one.
fn exchange<const R: usize>(rig: &mut Rig<R>, n: usize) -> (Vec<Event>, Vec<Event>) {
    let msgs = messages(n);
    let (mut sent, mut posted) = (0, 0);
    let (mut ea, mut eb) = (Vec::new(), Vec::new());
    let deadline = Instant::now() + Duration::from_secs(30);
    while ea.len() < n || eb.len() < n {
        while posted < n && rig.b.recv(RecvWr::notification(posted as u64)).is_ok() {
            posted += 1;
        }
        while sent < n.min(eb.len() + CREDIT)
            && rig.a.send(write(&rig.bufs, sent, msgs[sent])).is_ok()
        {
            sent += 1;
        }
        // Traffic is held back until the sender's virtual QP is full (SLOTS requests)
        // and one more waits in the poll thread behind it: backpressure,
        // deterministically. Nothing completes meanwhile, so once one request is left
        // in the ring, the poll thread has taken SLOTS + 1.
        if !rig.go.load(Ordering::Relaxed) && sent == CREDIT && rig.a.queued() == 1 {
            rig.go.store(true, Ordering::Relaxed);
        }
        while let Some(e) = rig.a.poll() {
            ea.push(e);
        }
        while let Some(e) = rig.b.poll() {
            eb.push(e);
        }
        assert!(
            Instant::now() < deadline,
            "stuck: sent {sent}, posted {posted}, events {} / {}",
            ea.len(),
            eb.len()
        );
        std::thread::yield_now();
    }
    (ea, eb)
}

fn check_in_order(ea: &[Event], eb: &[Event], n: usize) {
    let msgs = messages(n);
    for (i, e) in ea.iter().enumerate() {
        let Event::Completed(wc) = e else {
            panic!("send {i}: {e:?}")
        };
        assert_eq!(wc.wr_id, i as u64, "sends complete in posting order");
        assert_eq!(wc.status, WcStatus::SUCCESS, "send {i}");
        assert_eq!((wc.qp_num, wc.byte_len), (1, msgs[i].1));
    }
    for (i, e) in eb.iter().enumerate() {
        let Event::Completed(wc) = e else {
            panic!("recv {i}: {e:?}")
        };
        assert_eq!(wc.wr_id, i as u64, "receives complete in posting order");
        assert_eq!(wc.status, WcStatus::SUCCESS, "recv {i}");
        assert_eq!(wc.opcode, WcOpcode::RECV_RDMA_WITH_IMM);
        assert_eq!((wc.qp_num, wc.byte_len), (2, msgs[i].1));
    }
}

fn data_round_trip<const R: usize>(idle: Idle, core: Option<usize>) {
    let mut rig = rig::<R>(PollerConfig {
        idle,
        core,
        ..PollerConfig::default()
    });
    let n = 120;
    let (ea, eb) = exchange(&mut rig, n);
    check_in_order(&ea, &eb, n);
    assert!(
        rig.a.poll().is_none() && rig.b.poll().is_none(),
        "one event each"
    );
    let stats = rig.poller.drain(Duration::from_secs(10)).unwrap();
    assert_eq!(stats.submitted, 2 * n as u64);
    assert_eq!(stats.completed, 2 * n as u64);
    assert_eq!(stats.rejected, 0);
    assert!(stats.backpressure >= 1, "{stats:?}");
    assert!(!stats.aborted && !stats.timed_out, "{stats:?}");
    assert_eq!(stats.outstanding, 0);
    assert!(stats.undelivered.is_empty());
    if let Idle::Block { .. } = idle {
        assert!(stats.sleeps >= 1, "{stats:?}");
    }

    let total: u64 = messages(n).iter().map(|m| m.1).sum();
    let dst = rig.dump.recv().unwrap();
    let src = pattern();
    assert_eq!(
        &dst[..total as usize],
        &src[..total as usize],
        "data landed"
    );
    assert!(
        dst[total as usize..].iter().all(|&b| b == 0),
        "and nothing else"
    );
}

#[test]
fn data_arrives_in_order_with_a_pinned_spinning_thread() {
    data_round_trip::<64>(Idle::Spin, Some(0));
}

#[test]
fn nothing_is_lost_under_backpressure_with_tiny_rings() {
    data_round_trip::<4>(Idle::SpinThenYield { spins: 8 }, None);
}

#[test]
fn blocking_without_a_channel_parks_and_still_delivers() {
    data_round_trip::<16>(
        Idle::Block {
            spins: 4,
            timeout: Duration::from_millis(1),
        },
        None,
    );
}

#[test]
fn abort_reports_every_outstanding_request_once() {
    let mut rig = rig::<32>(PollerConfig::default());
    let msgs = messages(10);
    for (i, m) in msgs.iter().enumerate() {
        rig.a.send(write(&rig.bufs, i, *m)).unwrap();
    }
    for i in 0..5 {
        rig.b.recv(RecvWr::notification(100 + i)).unwrap();
    }
    // A request the virtual QP refuses outright is rejected, not lost.
    let bad = SendWr {
        opcode: Opcode(99),
        ..write(&rig.bufs, 10, msgs[0])
    };
    rig.a.send(bad).unwrap();
    // Wait until the poll thread took everything (nothing moves: `go` is off).
    let deadline = Instant::now() + Duration::from_secs(10);
    while rig.a.queued() > 0 || rig.b.queued() > 0 {
        assert!(Instant::now() < deadline);
        std::thread::yield_now();
    }
    let stats = rig.poller.abort(Duration::from_secs(10)).unwrap();
    assert!(stats.aborted && !stats.timed_out, "{stats:?}");
    assert_eq!(stats.outstanding, 0);
    assert!(stats.undelivered.is_empty());

    let mut ea = Vec::new();
    while let Some(e) = rig.a.poll() {
        ea.push(e);
    }
    let mut eb = Vec::new();
    while let Some(e) = rig.b.poll() {
        eb.push(e);
    }
    let mut ids: Vec<u64> = ea.iter().filter_map(Event::wr_id).collect();
    ids.sort_unstable();
    assert_eq!(ids, (0..=10).collect::<Vec<_>>(), "each send reported once");
    assert!(ea.contains(&Event::Rejected {
        wr_id: 10,
        error: Refusal::Send(PostSendError::UnknownOpcode(Opcode(99)))
    }));
    let completed: Vec<_> = ea
        .iter()
        .filter_map(|e| match e {
            Event::Completed(wc) => Some(*wc),
            Event::Rejected { .. } | Event::PathFailed(_) => None,
        })
        .collect();
    assert_eq!(
        completed.iter().map(|w| w.wr_id).collect::<Vec<_>>(),
        (0..10).collect::<Vec<_>>(),
        "in posting order"
    );
    assert!(completed.iter().all(|w| !w.status.is_ok()), "{completed:?}");
    assert_eq!(
        eb.iter().filter_map(Event::wr_id).collect::<Vec<_>>(),
        (100..105).collect::<Vec<_>>(),
        "each receive reported once, in order"
    );
    assert!(eb
        .iter()
        .all(|e| matches!(e, Event::Completed(wc) if !wc.status.is_ok())));
}

#[test]
fn set_up_failures_are_errors() {
    let go = Arc::new(AtomicBool::new(false));
    // The factory built two virtual QPs; three handles were asked for.
    let (btx, _brx) = mpsc::channel();
    let (dtx, _drx) = mpsc::channel();
    let r = PollThread::<8>::spawn(PollerConfig::default(), 3, factory(go.clone(), btx, dtx));
    assert!(matches!(r, Err(Error::Poller { .. })), "{r:?}");

    // A core that does not exist.
    let (btx, _brx) = mpsc::channel();
    let (dtx, _drx) = mpsc::channel();
    let cfg = PollerConfig {
        core: Some(100_000),
        ..PollerConfig::default()
    };
    let r = PollThread::<8>::spawn(cfg, 2, factory(go.clone(), btx, dtx));
    assert!(matches!(r, Err(Error::Poller { .. })), "{r:?}");

    // The factory's own error comes back as is.
    let r = PollThread::<8>::spawn(
        PollerConfig::default(),
        1,
        || -> vqp_host::Result<SimStack> { Err(Error::InvalidArgument { what: "no NIC" }) },
    );
    assert!(
        matches!(r, Err(Error::InvalidArgument { what: "no NIC" })),
        "{r:?}"
    );

    let cfg = PollerConfig {
        batch: 0,
        ..PollerConfig::default()
    };
    let (btx, _brx) = mpsc::channel();
    let (dtx, _drx) = mpsc::channel();
    let r = PollThread::<8>::spawn(cfg, 2, factory(go, btx, dtx));
    assert!(matches!(r, Err(Error::InvalidArgument { .. })), "{r:?}");
}

/// A send travels in one ring slot and leaves its keys and atomic operands behind when
/// they are the last send's (keys) or zero (operands): every request must still reach
/// the virtual QP with its own.
#[test]
fn each_request_reaches_the_virtual_qp_with_its_own_keys_and_operands() {
    let mut rig = rig::<8>(PollerConfig::default());
    rig.go.store(true, Ordering::Relaxed);
    let bufs = rig.bufs;
    let counter = bufs.dst + LEN as u64 - 8;
    let plain = |i: usize, off: u64, keys: Keys| SendWr {
        opcode: Opcode::RDMA_WRITE,
        keys,
        ..write(&bufs, i, (off, 100))
    };
    let atomic = |i: u64, opcode, compare_add, swap| SendWr {
        compare_add,
        swap,
        ..SendWr::new(i, opcode, bufs.src + LEN as u64 - 8, 8, counter, bufs.keys)
    };
    // Keys for a device the virtual QP does not use: refused for want of device 0's.
    let stray = Keys::none().with(1, 1, 2);
    let requests = [
        plain(0, 0, bufs.keys),
        plain(1, 100, stray),
        atomic(2, Opcode::ATOMIC_FETCH_AND_ADD, 5, 0),
        atomic(3, Opcode::ATOMIC_CMP_AND_SWP, 5, 42),
        // Adds nothing: the operands of the send before must not carry over.
        atomic(4, Opcode::ATOMIC_FETCH_AND_ADD, 0, 0),
        plain(5, 200, bufs.keys),
        plain(6, 300, stray),
        plain(7, 400, bufs.keys),
    ];
    let mut events = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    for wr in requests {
        // One at a time: the ring holds 8 slots and a send whose keys changed takes two.
        while rig.a.send(wr).is_err() {
            assert!(Instant::now() < deadline, "ring stays full");
            std::thread::yield_now();
        }
        while events.len() <= wr.wr_id as usize {
            if let Some(e) = rig.a.poll() {
                events.push(e);
            }
            assert!(Instant::now() < deadline, "no event for {}", wr.wr_id);
        }
    }
    for (i, e) in events.iter().enumerate() {
        match (i, e) {
            (1 | 6, Event::Rejected { wr_id, error }) => {
                assert_eq!(*wr_id, i as u64);
                assert_eq!(
                    *error,
                    Refusal::Send(PostSendError::MissingKey { device: 0 })
                );
            }
            (_, Event::Completed(wc)) => {
                assert_eq!(
                    (wc.wr_id, wc.status),
                    (i as u64, WcStatus::SUCCESS),
                    "{e:?}"
                );
            }
            _ => panic!("request {i}: {e:?}"),
        }
    }
    let _ = rig.poller.drain(Duration::from_secs(10)).unwrap();
    let dst = rig.dump.recv().unwrap();
    let src = pattern();
    for (off, landed) in [
        (0, true),
        (100, false),
        (200, true),
        (300, false),
        (400, true),
    ] {
        let got = &dst[off..off + 100];
        if landed {
            assert_eq!(got, &src[off..off + 100], "write at {off}");
        } else {
            assert!(got.iter().all(|&b| b == 0), "refused write at {off} landed");
        }
    }
    let value = u64::from_ne_bytes(dst[LEN - 8..].try_into().unwrap());
    assert_eq!(value, 42, "add 5, swap 5 for 42, add 0");
}
