//! A poll thread over verbs (softverbs, in process) in `Idle::Block`: it sleeps on the
//! completion channel and wakes for a completion, a submission and a shutdown request
//! at once, not at its (long) timeout.

use std::sync::mpsc;
use std::time::{Duration, Instant};

use vqp_core::split::SplitPolicy;
use vqp_core::{Config, Keys, Mode, Opcode, RecvWr, SendWr, Wc, WcOpcode};
use vqp_host::poller::ChannelBlocker;
use vqp_host::{
    AccessFlags, Context, Endpoint, Event, Handle, Idle, PollThread, PollerConfig, Settings, Stack,
    Verbs, VerbsCq, VerbsQp,
};

type Ep = Endpoint<4, 16, 64, 256, 1, 16>;
type VerbsStack = Stack<VerbsQp, VerbsCq, 4, 16, 64, 256, 1, 16>;

/// Far longer than the test may take: only a wake-up ends a sleep in time.
const SLEEP: Duration = Duration::from_secs(30);

fn settings() -> Settings {
    Settings::new(
        Config {
            split: SplitPolicy::new(1024),
            max_outstanding: 16,
            recv_depth: 16,
            qp_num: 9,
            ..Config::new(Mode::Dqplb)
        },
        2,
    )
}

fn wait_event(h: &mut Handle<8>, since: Instant) -> Event {
    loop {
        if let Some(e) = h.poll() {
            return e;
        }
        assert!(since.elapsed() < Duration::from_secs(10), "no wake-up");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// softverbs' in-process function table.
fn verbs() -> Verbs {
    // SAFETY: softverbs implements the libibverbs ABI; its functions are static.
    unsafe { Verbs::from_table(vqp_softverbs::verbs_table()) }
}

#[test]
fn block_wakes_for_completions_submissions_and_shutdown() {
    let verbs = verbs();
    let ctx = Context::open(&verbs, None).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let b = Ep::create(&pd, &settings(), None).unwrap();
    let card_b = b.card();
    let (card_tx, card_rx) = mpsc::channel();
    // Side A shares B's PD: softverbs checks keys, and B writes into the buffer
    // registered there.
    let pd_a = pd.clone();
    let factory = move || -> vqp_host::Result<VerbsStack> {
        let channel = pd_a.context().create_comp_channel()?;
        let a = Ep::create(&pd_a, &settings(), Some(&channel))?;
        let _ = card_tx.send(a.card());
        let side = a.connect(&card_b)?;
        let blocker = ChannelBlocker::new(channel, vec![side.cq.clone()])?;
        Ok(Stack::new(side.vcq, vec![side.vqp]).with_blocker(blocker))
    };
    let config = PollerConfig {
        idle: Idle::Block {
            spins: 8,
            timeout: SLEEP,
        },
        ..PollerConfig::default()
    };
    let (poller, mut handles) = PollThread::<8>::spawn(config, 1, factory).unwrap();
    let mut h = handles.pop().unwrap();
    let mut b = b.connect(&card_rx.recv().unwrap()).unwrap();
    let mr = pd
        .register_buffer(1 << 16, AccessFlags::ALL_REMOTE)
        .unwrap();

    // A submission wakes the sleeping thread (the eventfd), which takes the receive.
    std::thread::sleep(Duration::from_millis(30));
    h.recv(RecvWr::notification(1)).unwrap();
    let start = Instant::now();
    while h.queued() > 0 {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "submission did not wake it"
        );
        std::thread::sleep(Duration::from_millis(1));
    }

    // A completion wakes it (the CQ was armed; the event comes on the channel).
    std::thread::sleep(Duration::from_millis(30));
    let wr = SendWr::new(
        7,
        Opcode::RDMA_WRITE_WITH_IMM,
        mr.addr(),
        3000,
        mr.addr() + 8192,
        Keys::single(mr.lkey(), mr.rkey()),
    );
    b.vqp.post_send(&wr).unwrap();
    let start = Instant::now();
    match wait_event(&mut h, start) {
        Event::Completed(wc) => {
            assert!(wc.status.is_ok(), "{wc:?}");
            assert_eq!((wc.wr_id, wc.qp_num, wc.byte_len), (1, 9, 3000));
            assert_eq!(wc.opcode, WcOpcode::RECV_RDMA_WITH_IMM);
        }
        other => panic!("{other:?}"),
    }
    let mut out = [Wc::EMPTY; 4];
    let n = b.vcq.poll(&mut [&mut b.vqp], &mut out).unwrap();
    assert_eq!((n, out[0].wr_id), (1, 7));

    // A shutdown request wakes it too.
    std::thread::sleep(Duration::from_millis(30));
    let start = Instant::now();
    let stats = poller.drain(SLEEP).unwrap();
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "drain waited for the timeout"
    );
    assert!(stats.sleeps >= 3, "{stats:?}");
    assert!(!stats.aborted && !stats.timed_out);
    assert_eq!((stats.submitted, stats.completed), (1, 1));
}
