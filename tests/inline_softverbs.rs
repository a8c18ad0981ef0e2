//! The post contract over softverbs: an inline payload given as a slice is copied at
//! post time and lands at the peer (SEND into a data receive, RDMA WRITE), even though
//! the slice is overwritten as soon as the post returns; a payload given by raw
//! address is refused by the safe post, which posts nothing, and by a poll thread's
//! safe hand-off, but not by its `unsafe` one.

use std::sync::mpsc;
use std::time::{Duration, Instant};

use vqp_core::split::SplitPolicy;
use vqp_core::{
    Config, Keys, Mode, Opcode, PostSendError, RecvWr, SendFlags, SendWr, Wc, WcOpcode,
};
use vqp_host::{
    AccessFlags, Connected, Context, Endpoint, Event, Handle, MemoryRegion, PollThread,
    PollerConfig, Refusal, Settings, Stack, Verbs, VerbsCq, VerbsQp,
};

type Ep = Endpoint<1, 16, 64, 128, 1, 32>;
type Side = Connected<1, 16, 64, 128, 1, 32>;

fn verbs() -> Verbs {
    // SAFETY: the table comes from the provider linked into this binary; its
    // functions have libibverbs' signatures and live as long as the process.
    unsafe { Verbs::from_table(vqp_softverbs::verbs_table()) }
}

/// A SPRAY pair over one data QP (every opcode passes through whole): sender on
/// soft0, receiver on soft1, each with a zeroed registered buffer of 4 KiB.
fn pair() -> (Side, Side, MemoryRegion, MemoryRegion) {
    let v = verbs();
    let cfg = Config {
        split: SplitPolicy::new(64 << 10),
        max_outstanding: 16,
        recv_depth: 16,
        ..Config::new(Mode::Spray)
    };
    let settings = Settings::new(cfg, 1);
    let ctx_a = Context::open(&v, Some("soft0")).expect("soft0");
    let ctx_b = Context::open(&v, Some("soft1")).expect("soft1");
    let (pd_a, pd_b) = (ctx_a.alloc_pd().expect("pd"), ctx_b.alloc_pd().expect("pd"));
    let a = Ep::create(&pd_a, &settings, None).expect("endpoint");
    let b = Ep::create(&pd_b, &settings, None).expect("endpoint");
    let (card_a, card_b) = (a.card(), b.card());
    let a = a.connect(&card_b).expect("connect");
    let b = b.connect(&card_a).expect("connect");
    let access = AccessFlags::ALL_REMOTE;
    let mr_a = pd_a.register_buffer(4096, access).expect("mr");
    let mr_b = pd_b.register_buffer(4096, access).expect("mr");
    (a, b, mr_a, mr_b)
}

/// Polls both sides until `a` reported `sends` completions and `b` `recvs`.
fn settle(a: &mut Side, b: &mut Side, sends: usize, recvs: usize) -> (Vec<Wc>, Vec<Wc>) {
    let (mut got_a, mut got_b) = (Vec::new(), Vec::new());
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut out = [Wc::EMPTY; 16];
    while got_a.len() < sends || got_b.len() < recvs {
        let n = a.vcq.poll(&mut [&mut a.vqp], &mut out).expect("poll");
        got_a.extend_from_slice(&out[..n]);
        let n = b.vcq.poll(&mut [&mut b.vqp], &mut out).expect("poll");
        got_b.extend_from_slice(&out[..n]);
        assert!(Instant::now() < deadline, "stuck: {got_a:?} / {got_b:?}");
    }
    (got_a, got_b)
}

#[test]
fn a_slice_payload_lands_though_the_slice_is_reused_at_once() {
    let (mut a, mut b, mr_a, mr_b) = pair();
    b.vqp
        .post_recv(&RecvWr::data(50, mr_b.addr(), 64, mr_b.lkey()))
        .unwrap();
    let keys = Keys::single(mr_a.lkey(), mr_b.rkey());

    let mut payload = *b"copied while posting, before the slice changed";
    let send = SendWr::new(1, Opcode::SEND, 0, 0, 0, Keys::none());
    a.vqp.post_send_inline(&send, &payload).unwrap();
    payload.fill(0xee);
    let write = SendWr::new(2, Opcode::RDMA_WRITE, 0, 0, mr_b.addr() + 1024, keys);
    a.vqp.post_send_inline(&write, b"written inline").unwrap();

    // A payload by address (here inside a registered buffer, which does not matter:
    // the CPU copy checks no key) is refused by the safe post, and nothing is posted.
    let raw = SendWr::new(3, Opcode::SEND, mr_a.addr(), 16, 0, keys)
        .flags(SendFlags::SIGNALED | SendFlags::INLINE);
    assert_eq!(a.vqp.post_send(&raw), Err(PostSendError::RawInline));
    assert_eq!(a.vqp.sends_in_flight(), 2);

    let (sends, recvs) = settle(&mut a, &mut b, 2, 1);
    let ids: Vec<u64> = sends.iter().map(|w| w.wr_id).collect();
    assert_eq!(ids, [1, 2]);
    assert!(sends.iter().all(|w| w.status.is_ok()), "{sends:?}");
    let r = recvs[0];
    assert_eq!((r.wr_id, r.opcode, r.byte_len), (50, WcOpcode::RECV, 46));
    // SAFETY: every request on the buffer completed; nothing writes it now.
    let buf = unsafe { mr_b.as_slice() }.expect("owned");
    assert_eq!(
        &buf[..46],
        b"copied while posting, before the slice changed"
    );
    assert_eq!(&buf[1024..1038], b"written inline");
}

type Stacked = Stack<VerbsQp, VerbsCq, 1, 16, 64, 128, 1, 32>;

/// The next event of `h`, within ten seconds.
fn next_event(h: &mut Handle<8>) -> Event {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(e) = h.poll() {
            return e;
        }
        assert!(Instant::now() < deadline, "no event");
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn a_poll_thread_refuses_a_raw_inline_send_unless_it_is_vouched_for() {
    let v = verbs();
    let cfg = Config {
        max_outstanding: 16,
        recv_depth: 16,
        ..Config::new(Mode::Spray)
    };
    let settings = Settings::new(cfg, 1);
    let ctx_b = Context::open(&v, Some("soft1")).expect("soft1");
    let pd_b = ctx_b.alloc_pd().expect("pd");
    let b = Ep::create(&pd_b, &settings, None).expect("endpoint");
    let card_b = b.card();
    let (card_tx, card_rx) = mpsc::channel();
    let factory = move || -> vqp_host::Result<Stacked> {
        let ctx = Context::open(&verbs(), Some("soft0"))?;
        let a = Ep::create(&ctx.alloc_pd()?, &settings, None)?;
        let _ = card_tx.send(a.card());
        let a = a.connect(&card_b)?;
        Ok(Stack::new(a.vcq, vec![a.vqp]))
    };
    let (poller, mut handles) =
        PollThread::<8>::spawn(PollerConfig::default(), 1, factory).expect("poll thread");
    let mut h = handles.pop().expect("handle");
    let mut b = b.connect(&card_rx.recv().expect("card")).expect("connect");
    let mr_b = pd_b
        .register_buffer(4096, AccessFlags::ALL_REMOTE)
        .expect("mr");
    b.vqp
        .post_recv(&RecvWr::data(60, mr_b.addr(), 64, mr_b.lkey()))
        .unwrap();

    let payload: Box<[u8]> = Box::from(&b"read on the poll thread"[..]);
    let wr = |id| {
        SendWr::new(
            id,
            Opcode::SEND,
            payload.as_ptr() as u64,
            23,
            0,
            Keys::none(),
        )
        .flags(SendFlags::SIGNALED | SendFlags::INLINE)
    };
    h.send(wr(1)).unwrap();
    let refused = Event::Rejected {
        wr_id: 1,
        error: Refusal::Send(PostSendError::RawInline),
    };
    assert_eq!(next_event(&mut h), refused);
    // SAFETY: `payload` lives, unwritten, until after the request's event.
    unsafe { h.send_unchecked(wr(2)) }.unwrap();
    match next_event(&mut h) {
        Event::Completed(wc) => assert_eq!((wc.wr_id, wc.status.is_ok()), (2, true), "{wc:?}"),
        other => panic!("{other:?}"),
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut out = [Wc::EMPTY; 4];
    while b.vcq.poll(&mut [&mut b.vqp], &mut out).expect("poll") == 0 {
        assert!(Instant::now() < deadline, "nothing received");
    }
    assert_eq!((out[0].wr_id, out[0].byte_len), (60, 23));
    // SAFETY: the receive completed; nothing writes the buffer now.
    let buf = unsafe { mr_b.as_slice() }.expect("owned");
    assert_eq!(&buf[..23], &payload[..]);
    let stats = poller.drain(Duration::from_secs(10)).expect("drain");
    assert_eq!((stats.submitted, stats.rejected), (1, 1));
}
