//! The virtual QP end to end over softverbs: two devices, host endpoints connected
//! through cards, both modes, 1, 4 and 8 data QPs, random cross-QP order, data checked
//! byte for byte, and a QP failing in the middle of a transfer.

use std::time::{Duration, Instant};

use vqp_core::split::SplitPolicy;
use vqp_core::{Config, Keys, Mode, Opcode, PostSendError, RecvWr, SendWr, Wc, WcOpcode};
use vqp_host::{AccessFlags, Connected, Context, Endpoint, MemoryRegion, Settings, Verbs};
use vqp_softverbs::{QpSelector, Reorder};

type Ep = Endpoint<8, 16, 128, 512, 1, 32>;
type Side = Connected<8, 16, 128, 512, 1, 32>;

fn verbs() -> Verbs {
    // SAFETY: the table comes from the provider linked into this binary; its
    // functions have libibverbs' signatures and live as long as the process.
    unsafe { Verbs::from_table(vqp_softverbs::verbs_table()) }
}

/// Sender on soft0, receiver on soft1, each with a registered buffer of `len` bytes.
fn pair(mode: Mode, qps: usize, len: usize) -> (Side, Side, MemoryRegion, MemoryRegion) {
    vqp_softverbs::set_reorder(Reorder::Random { seed: 0x5eed });
    let v = verbs();
    let cfg = Config {
        split: SplitPolicy::new(64 << 10),
        max_outstanding: 16,
        recv_depth: 16,
        ..Config::new(mode)
    };
    let settings = Settings::new(cfg, qps);
    let (ctx_a, ctx_b) = (
        Context::open(&v, Some("soft0")).expect("soft0"),
        Context::open(&v, Some("soft1")).expect("soft1"),
    );
    let (pd_a, pd_b) = (ctx_a.alloc_pd().expect("pd"), ctx_b.alloc_pd().expect("pd"));
    let a = Ep::create(&pd_a, &settings, None).expect("endpoint");
    let b = Ep::create(&pd_b, &settings, None).expect("endpoint");
    let (card_a, card_b) = (a.card(), b.card());
    let a = a.connect(&card_b).expect("connect");
    let b = b.connect(&card_a).expect("connect");
    let mut mr_a = pd_a
        .register_buffer(len, AccessFlags::ALL_REMOTE)
        .expect("mr");
    let mr_b = pd_b
        .register_buffer(len, AccessFlags::ALL_REMOTE)
        .expect("mr");
    // SAFETY: no work request uses the buffer yet.
    let src = unsafe { mr_a.as_mut_slice() }.expect("mapped");
    for (i, byte) in src.iter_mut().enumerate() {
        *byte = (i % 251) as u8 ^ (i >> 12) as u8;
    }
    (a, b, mr_a, mr_b)
}

fn poll(side: &mut Side, into: &mut Vec<Wc>) {
    let mut out = [Wc::EMPTY; 32];
    let n = side.vcq.poll(&mut [&mut side.vqp], &mut out).expect("poll");
    into.extend_from_slice(&out[..n]);
}

/// Send one WRITE_WITH_IMM per size (each to its own offset), with a notification
/// receive for each; return what each side reported once the sender is done.
fn transfer(
    a: &mut Side,
    b: &mut Side,
    mr_a: &MemoryRegion,
    mr_b: &MemoryRegion,
    sizes: &[u64],
) -> (Vec<Wc>, Vec<Wc>) {
    let keys = Keys::single(mr_a.lkey(), mr_b.rkey());
    let (mut sends, mut recvs) = (Vec::new(), Vec::new());
    let mut next = 0;
    let mut offset = 0;
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut receiver_done_by = None;
    loop {
        while next < sizes.len() {
            let len = sizes[next];
            let wr = SendWr::new(
                next as u64,
                Opcode::RDMA_WRITE_WITH_IMM,
                mr_a.addr() + offset,
                len,
                mr_b.addr() + offset,
                keys,
            )
            .imm((next as u32).to_be());
            if b.vqp.failure().is_none()
                && b.vqp.post_recv(&RecvWr::notification(next as u64)).is_err()
            {
                break;
            }
            match a.vqp.post_send(&wr) {
                Ok(()) => {
                    next += 1;
                    offset += len;
                }
                Err(PostSendError::Full) => break,
                Err(PostSendError::Failed(_)) => next = sizes.len(),
                Err(e) => panic!("refused: {e}"),
            }
        }
        poll(a, &mut sends);
        poll(b, &mut recvs);
        let posted = a.vqp.sends_in_flight() + sends.len();
        if next == sizes.len() && sends.len() == posted {
            // The sender is done; give the receiver a moment to report what landed.
            let by = *receiver_done_by.get_or_insert(Instant::now() + Duration::from_millis(300));
            if recvs.len() == sends.len() || Instant::now() > by {
                return (sends, recvs);
            }
        }
        assert!(
            Instant::now() < deadline,
            "no progress: {} sends, {} receives",
            sends.len(),
            recvs.len()
        );
    }
}

fn check(mode: Mode, qps: usize) {
    let sizes = [1u64, 4096, 1 << 20, 3 * 65536 + 17];
    let total: u64 = sizes.iter().sum();
    let (mut a, mut b, mr_a, mr_b) = pair(mode, qps, total as usize);
    let (sends, recvs) = transfer(&mut a, &mut b, &mr_a, &mr_b, &sizes);
    assert_eq!(sends.len(), sizes.len());
    assert_eq!(recvs.len(), sizes.len());
    for (i, (s, r)) in sends.iter().zip(&recvs).enumerate() {
        assert_eq!(
            (s.wr_id, s.status.is_ok()),
            (i as u64, true),
            "{mode:?} {qps}: send {i}: {}",
            s.status
        );
        assert_eq!(
            (r.wr_id, r.status.is_ok()),
            (i as u64, true),
            "{mode:?} {qps}: recv {i}: {}",
            r.status
        );
        assert_eq!(r.opcode, WcOpcode::RECV_RDMA_WITH_IMM);
        if mode == Mode::Dqplb && qps > 1 {
            assert_eq!((r.imm_data, r.byte_len), (None, sizes[i]));
        } else {
            assert_eq!(r.imm_data, Some((i as u32).to_be()));
        }
    }
    // SAFETY: every request completed; nothing uses the buffers any more.
    let (src, dst) = unsafe {
        (
            mr_a.as_slice().expect("mapped"),
            mr_b.as_slice().expect("mapped"),
        )
    };
    assert!(
        src == dst,
        "{mode:?} {qps}: destination differs from source"
    );
}

#[test]
fn dqplb_with_1_4_and_8_data_qps() {
    for qps in [1, 4, 8] {
        check(Mode::Dqplb, qps);
    }
}

#[test]
fn spray_with_1_4_and_8_data_qps() {
    for qps in [1, 4, 8] {
        check(Mode::Spray, qps);
    }
}

#[test]
fn a_qp_failing_mid_transfer_reports_every_request_once() {
    for mode in [Mode::Dqplb, Mode::Spray] {
        let sizes = [1u64 << 20; 8];
        let (mut a, mut b, mr_a, mr_b) = pair(mode, 4, 8 << 20);
        let victim = a.vqp.data_qp_num(2).expect("qp");
        vqp_softverbs::fail_qp_after(QpSelector::QpNum(victim), 10);
        let (sends, _) = transfer(&mut a, &mut b, &mr_a, &mr_b, &sizes);
        assert!(!sends.is_empty());
        for (i, s) in sends.iter().enumerate() {
            assert_eq!(
                s.wr_id, i as u64,
                "{mode:?}: reported out of order or twice"
            );
        }
        assert!(
            sends.iter().any(|s| !s.status.is_ok()),
            "{mode:?}: the failure was not reported"
        );
        assert!(a.vqp.failure().is_some());
        assert_eq!(
            a.vqp.sends_in_flight(),
            0,
            "{mode:?}: a request was never reported"
        );
    }
}
