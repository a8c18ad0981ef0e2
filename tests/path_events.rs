//! Asynchronous events routed to virtual QPs: a poll thread given an `EventWatch` fails
//! the virtual QP whose physical QP (or device) an event names, reports the event
//! (`Event::PathFailed`), then every outstanding request once with an error — the
//! failures no completion carries: a SPRAY receiver's data QP put in error by a bad
//! request while only its notify QP has receives, a port going down under idle QPs.
//!
//! In-process softverbs; the link control is process-wide, so the tests take turns.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use vqp::core::split::SplitPolicy;
use vqp::core::{Config, Keys, Mode, Opcode, RecvWr, SendWr, Wc, WcStatus};
use vqp::host::poller::EventWatch;
use vqp::host::{
    AccessFlags, AsyncEventKind, Connected, Context, Endpoint, Event, EventSubject, Handle,
    MemoryRegion, PollThread, PollerConfig, Settings, Stack, Verbs, VerbsCq, VerbsQp,
};

type Ep = Endpoint<4, 16, 64, 256, 1, 16>;
type Conn = Connected<4, 16, 64, 256, 1, 16>;
type VerbsStack = Stack<VerbsQp, VerbsCq, 4, 16, 64, 256, 1, 16>;

static TURN: Mutex<()> = Mutex::new(());

/// Takes soft1's link down; back up when dropped (a failing test leaves it up).
struct LinkDown;

impl LinkDown {
    fn soft1() -> LinkDown {
        vqp_softverbs::set_link(1, false).unwrap();
        LinkDown
    }
}

impl Drop for LinkDown {
    fn drop(&mut self) {
        let _ = vqp_softverbs::set_link(1, true);
    }
}

fn settings(qp_num: u32) -> Settings {
    Settings::new(
        Config {
            split: SplitPolicy::new(4096),
            max_outstanding: 16,
            recv_depth: 16,
            qp_num,
            ..Config::new(Mode::Spray)
        },
        2,
    )
}

struct Sides {
    a: Conn,
    mr_a: MemoryRegion,
    mr_b: MemoryRegion,
    ctx_b: Context,
    /// B's poll thread, watching B's context, and its handle.
    poller: PollThread<16>,
    h: Handle<16>,
}

/// A (soft0) connected to B (soft1), two data QPs in SPRAY; B served by a poll thread
/// with an event watch on its context (device index 0 of its virtual CQ).
fn sides() -> Sides {
    // SAFETY: softverbs' table implements the libibverbs ABI.
    let verbs = unsafe { Verbs::from_table(vqp_softverbs::verbs_table()) };
    let open = |dev: &str| Context::open(&verbs, Some(dev)).unwrap();
    let (ctx_a, ctx_b) = (open("soft0"), open("soft1"));
    let (pd_a, pd_b) = (ctx_a.alloc_pd().unwrap(), ctx_b.alloc_pd().unwrap());
    let ea = Ep::create(&pd_a, &settings(0xa), None).unwrap();
    let eb = Ep::create(&pd_b, &settings(0xb), None).unwrap();
    let mr_a = pd_a
        .register_buffer(1 << 16, AccessFlags::ALL_REMOTE)
        .unwrap();
    let mr_b = pd_b
        .register_buffer(1 << 16, AccessFlags::ALL_REMOTE)
        .unwrap();
    let (card_a, card_b) = (ea.card(), eb.card());
    let a = ea.connect(&card_b).unwrap();
    let b = Box::new(eb.connect(&card_a).unwrap());
    let watch = EventWatch::spawn(vec![(ctx_b.clone(), 0)]).unwrap();
    let factory = move || -> vqp::host::Result<VerbsStack> {
        let Connected { vqp, vcq, .. } = *b;
        Ok(Stack::new(vcq, vec![vqp]).with_events(watch))
    };
    let (poller, mut hs) = PollThread::<16>::spawn(PollerConfig::default(), 1, factory).unwrap();
    let h = hs.pop().unwrap();
    Sides {
        a,
        mr_a,
        mr_b,
        ctx_b,
        poller,
        h,
    }
}

/// The next `n` events of `h` (fails after 10 s).
fn events(h: &mut Handle<16>, n: usize) -> Vec<Event> {
    let start = Instant::now();
    let mut out = Vec::new();
    while out.len() < n {
        match h.poll() {
            Some(e) => out.push(e),
            None => {
                assert!(
                    start.elapsed() < Duration::from_secs(10),
                    "{} of {n} events: {out:?}",
                    out.len()
                );
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }
    out
}

/// The receives `ids` are reported once each, in order, with an error.
fn assert_failed_in_order(got: &[Event], ids: &[u64]) {
    assert_eq!(got.iter().filter_map(Event::wr_id).collect::<Vec<_>>(), ids);
    assert!(
        got.iter().all(|e| match e {
            Event::Completed(wc) => !wc.status.is_ok(),
            Event::Rejected { .. } => true,
            Event::PathFailed(_) => false,
        }),
        "{got:?}"
    );
}

/// Waits until the poll thread took every request of `h` (and so posted it).
fn taken(h: &Handle<16>) {
    let start = Instant::now();
    while h.queued() > 0 {
        assert!(start.elapsed() < Duration::from_secs(10), "not taken");
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn a_receivers_data_qp_failed_by_a_bad_request_fails_its_virtual_qp() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    let mut s = sides();
    s.h.recv(RecvWr::notification(1)).unwrap();
    s.h.recv(RecvWr::notification(2)).unwrap();
    taken(&s.h);
    // A writes with a key B never issued: B's data QP refuses the first fragment (and
    // goes to error, raising IBV_EVENT_QP_ACCESS_ERR on B's context); A's write fails;
    // the notify never comes.
    let wr = SendWr::new(
        7,
        Opcode::RDMA_WRITE_WITH_IMM,
        s.mr_a.addr(),
        8192,
        s.mr_b.addr(),
        Keys::single(s.mr_a.lkey(), s.mr_b.rkey() ^ 0x100),
    );
    s.a.vqp.post_send(&wr).unwrap();
    let start = Instant::now();
    let mut out = [Wc::EMPTY; 4];
    let a_wc = loop {
        let n = s.a.vcq.poll(&mut [&mut s.a.vqp], &mut out).unwrap();
        if n > 0 {
            break out[0];
        }
        assert!(start.elapsed() < Duration::from_secs(10), "A saw nothing");
    };
    assert_eq!((a_wc.wr_id, a_wc.status), (7, WcStatus::REM_ACCESS_ERR));
    let got = events(&mut s.h, 3);
    let Event::PathFailed(ev) = got[0] else {
        panic!("{got:?}");
    };
    assert_eq!(ev.kind, AsyncEventKind::QpAccessErr);
    assert!(matches!(ev.subject, EventSubject::Qp { .. }));
    assert_failed_in_order(&got[1..], &[1, 2]);
    let stats = s.poller.abort(Duration::from_secs(5)).unwrap();
    assert_eq!(stats.path_failures, 1);
    drop(s.ctx_b);
}

#[test]
fn a_port_going_down_fails_the_virtual_qps_with_qps_on_it() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    let mut s = sides();
    s.h.recv(RecvWr::notification(1)).unwrap();
    // Once the poll thread posted it, take B's port down: nothing is in flight on the
    // data QPs, so only the event tells B.
    taken(&s.h);
    let down = LinkDown::soft1();
    let got = events(&mut s.h, 2);
    drop(down);
    assert_eq!(
        got[0],
        Event::PathFailed(vqp::host::AsyncEvent {
            kind: AsyncEventKind::PortErr,
            subject: EventSubject::Port(1),
        })
    );
    assert_failed_in_order(&got[1..], &[1]);
    let stats = s.poller.abort(Duration::from_secs(5)).unwrap();
    assert_eq!(stats.path_failures, 1);
}

/// A buffer registered on both devices (device 0 owns the memory).
struct Buf {
    on0: MemoryRegion,
    on1: Option<MemoryRegion>,
}

impl Buf {
    fn new(pd0: &vqp::host::ProtectionDomain, pd1: Option<&vqp::host::ProtectionDomain>) -> Buf {
        let on0 = pd0.register_buffer(LEN, AccessFlags::ALL_REMOTE).unwrap();
        let on1 = pd1.map(|pd| {
            // SAFETY: `on0`'s memory, which outlives this registration (`Buf`'s `Drop`
            // releases `on1` before `on0`).
            unsafe { pd.register_raw(on0.as_ptr(), LEN, AccessFlags::ALL_REMOTE) }.unwrap()
        });
        Buf { on0, on1 }
    }
}

impl Drop for Buf {
    fn drop(&mut self) {
        // The second registration goes before the memory's owner.
        drop(self.on1.take());
    }
}

const LEN: usize = 8 << 20;
const SIZE: u64 = 1 << 20;

fn keys(local: &Buf, remote: &Buf) -> Keys {
    let k = Keys::none().with(0, local.on0.lkey(), remote.on0.rkey());
    match (&local.on1, &remote.on1) {
        (Some(l), Some(r)) => k.with(1, l.lkey(), r.rkey()),
        _ => k,
    }
}

/// Events of `h` until `done` says the list is complete (fails after 10 s).
fn events_until(h: &mut Handle<64>, done: impl Fn(&[Event]) -> bool) -> Vec<Event> {
    let start = Instant::now();
    let mut out = Vec::new();
    while !done(&out) {
        match h.poll() {
            Some(e) => out.push(e),
            None => {
                assert!(start.elapsed() < Duration::from_secs(10), "{out:?}");
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }
    out
}

type Stack2 = Stack<VerbsQp, VerbsCq, 4, 16, 64, 256, 2, 16>;
type Ep2 = Endpoint<4, 16, 64, 256, 2, 16>;

/// One poll thread serves two virtual QPs sharing its CQs: X over soft0 and soft1, Y
/// over soft0 only. soft1's link goes down during a transfer on both: the event fails
/// X, which reports every request once; Y's transfer completes and Y keeps working.
#[test]
fn a_link_going_down_under_a_transfer_fails_only_the_virtual_qp_using_it() {
    link_down_under_a_transfer(false);
}

/// The same with re-dispatch: X goes on over soft0 alone, the fragments its soft1 QP
/// held go again there, and every request of X succeeds.
#[test]
fn with_redispatch_a_link_going_down_under_a_transfer_is_survived() {
    link_down_under_a_transfer(true);
}

fn link_down_under_a_transfer(redispatch: bool) {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    // SAFETY: softverbs' table implements the libibverbs ABI.
    let verbs = unsafe { Verbs::from_table(vqp_softverbs::verbs_table()) };
    let open = |dev: &str| Context::open(&verbs, Some(dev)).unwrap();
    let settings = |qp_num| {
        Settings::new(
            Config {
                split: SplitPolicy::new(64 << 10),
                max_outstanding: 16,
                recv_depth: 16,
                qp_num,
                redispatch,
                ..Config::new(Mode::Dqplb)
            },
            2,
        )
    };
    // The poll thread's side: shared CQs on both devices.
    let (c0, c1) = (open("soft0"), open("soft1"));
    let (pd0, pd1) = (c0.alloc_pd().unwrap(), c1.alloc_pd().unwrap());
    let (cq0, cq1) = (
        c0.create_cq(4096, None, 0).unwrap(),
        c1.create_cq(4096, None, 0).unwrap(),
    );
    let x = Ep2::create_with_cqs(&[&pd0, &pd1], &settings(0x1), &[&cq0, &cq1]).unwrap();
    let y = Ep2::create_with_cqs(&[&pd0], &settings(0x2), &[&cq0]).unwrap();
    // The peers, each with its own CQs: X' over soft0 and soft1, Y' over soft0.
    let (p0, p1) = (
        open("soft0").alloc_pd().unwrap(),
        open("soft1").alloc_pd().unwrap(),
    );
    let xp = Ep2::create_on(&[&p0, &p1], &settings(0x11), &[]).unwrap();
    let yp = Ep2::create_on(&[&p0], &settings(0x12), &[]).unwrap();
    let (cx, cy, cxp, cyp) = (x.card(), y.card(), xp.card(), yp.card());
    let mut vcq = vqp::core::VirtualCq::<VerbsCq, 2, 16>::new();
    vcq.add_cq(VerbsCq::with_batch(cq0.clone(), 16), 0, cq0.capacity())
        .unwrap();
    vcq.add_cq(VerbsCq::with_batch(cq1.clone(), 16), 1, cq1.capacity())
        .unwrap();
    let vx = x.connect_into(&cxp, &mut vcq).unwrap();
    let vy = y.connect_into(&cyp, &mut vcq).unwrap();
    let _xp = xp.connect(&cx).unwrap();
    let _yp = yp.connect(&cy).unwrap();
    let (bx, bxp) = (Buf::new(&pd0, Some(&pd1)), Buf::new(&p0, Some(&p1)));
    let (by, byp) = (Buf::new(&pd0, None), Buf::new(&p0, None));
    let watch = EventWatch::spawn(vec![(c0.clone(), 0), (c1.clone(), 1)]).unwrap();
    let factory = move || -> vqp::host::Result<Stack2> {
        Ok(Stack::new(vcq, vec![vx, vy]).with_events(watch))
    };
    let (poller, mut hs) = PollThread::<64>::spawn(PollerConfig::default(), 2, factory).unwrap();
    let mut hy = hs.pop().unwrap();
    let mut hx = hs.pop().unwrap();
    let write = |id: u64, local: &Buf, remote: &Buf| {
        let off = (id % 8) * SIZE;
        SendWr::new(
            id,
            Opcode::RDMA_WRITE,
            local.on0.addr() + off,
            SIZE,
            remote.on0.addr() + off,
            keys(local, remote),
        )
    };
    let n = 32;
    for id in 0..n {
        hx.send(write(id, &bx, &bxp)).unwrap();
        hy.send(write(id, &by, &byp)).unwrap();
    }
    vqp_softverbs::set_link(1, false).unwrap();
    let completed = |evs: &[Event]| evs.iter().filter(|e| e.wr_id().is_some()).count();
    let ex = events_until(&mut hx, |e| {
        completed(e) == n as usize && e.len() > n as usize
    });
    let ey = events_until(&mut hy, |e| completed(e) == n as usize);
    vqp_softverbs::set_link(1, true).unwrap();
    // X: the port event once, and every request once, in order (those that got through
    // before the outage succeeded; the others failed).
    let failed: Vec<_> = ex
        .iter()
        .filter(|e| matches!(e, Event::PathFailed(_)))
        .collect();
    assert_eq!(
        failed,
        [&Event::PathFailed(vqp::host::AsyncEvent {
            kind: AsyncEventKind::PortErr,
            subject: EventSubject::Port(1),
        })]
    );
    let ids: Vec<u64> = ex.iter().filter_map(Event::wr_id).collect();
    assert_eq!(ids, (0..n).collect::<Vec<_>>(), "{ex:?}");
    let x_failed = ex.iter().any(|e| {
        matches!(e, Event::Completed(wc) if !wc.status.is_ok())
            || matches!(e, Event::Rejected { .. })
    });
    assert_eq!(
        x_failed, !redispatch,
        "X's requests fail unless it re-dispatches: {ex:?}"
    );
    // Y: every request succeeded, and it keeps working.
    assert!(
        ey.iter()
            .all(|e| matches!(e, Event::Completed(wc) if wc.status.is_ok())),
        "{ey:?}"
    );
    hy.send(write(100, &by, &byp)).unwrap();
    let more = events_until(&mut hy, |e| !e.is_empty());
    assert!(matches!(more[0], Event::Completed(wc) if wc.wr_id == 100 && wc.status.is_ok()));
    let stats = poller.drain(Duration::from_secs(5)).unwrap();
    assert_eq!(stats.path_failures, 1);
    drop((by, byp, bx, bxp));
}
