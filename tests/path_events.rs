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

type Ep = Endpoint<4, 16, 64, 256, 16>;
type Conn = Connected<4, 16, 64, 256, 16>;
type VerbsStack = Stack<VerbsQp, VerbsCq, 4, 16, 64, 256, 1, 16>;

static TURN: Mutex<()> = Mutex::new(());

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

/// The receives `ids` complete once each, in order, with an error.
fn assert_failed_in_order(got: &[Event], ids: &[u64]) {
    let wcs: Vec<Wc> = got
        .iter()
        .map(|e| match e {
            Event::Completed(wc) => *wc,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(wcs.iter().map(|w| w.wr_id).collect::<Vec<_>>(), ids);
    assert!(wcs.iter().all(|w| !w.status.is_ok()), "{wcs:?}");
}

#[test]
fn a_receivers_data_qp_failed_by_a_bad_request_fails_its_virtual_qp() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    let mut s = sides();
    s.h.recv(RecvWr::notification(1)).unwrap();
    s.h.recv(RecvWr::notification(2)).unwrap();
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
    // Let the poll thread post it, then take B's port down: nothing is in flight on
    // the data QPs, so only the event tells B.
    std::thread::sleep(Duration::from_millis(20));
    vqp_softverbs::set_link(1, false).unwrap();
    let got = events(&mut s.h, 2);
    vqp_softverbs::set_link(1, true).unwrap();
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
