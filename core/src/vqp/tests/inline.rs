//! The post contract on the send side: a raw inline payload is refused by the safe
//! posts, a slice payload is copied during the call and never read again.

use super::*;

/// A signaled SEND whose payload the provider would copy from `addr` (`INLINE`).
fn raw_inline_send(wr_id: u64, addr: u64, len: u64) -> SendWr {
    SendWr::new(wr_id, Opcode::SEND, addr, len, 0, Keys::none())
        .flags(SendFlags::SIGNALED | SendFlags::INLINE)
}

fn send(wr_id: u64) -> SendWr {
    SendWr::new(wr_id, Opcode::SEND, 0, 0, 0, Keys::none())
}

#[test]
fn the_safe_posts_refuse_a_raw_inline_payload_and_post_nothing() {
    let f = Fabric::default();
    let (mut vqp, _vcq) = build(&f, Mode::Spray, 1);
    // An address no one handed over: the provider would read it with the CPU.
    let wild = raw_inline_send(1, 0x10, 64);
    assert_eq!(vqp.post_send(&wild), Err(PostSendError::RawInline));
    assert_eq!(
        vqp.post_send_many(&[send(2), wild]),
        Err((1, PostSendError::RawInline))
    );
    let sends = f.sends.borrow();
    assert_eq!(sends.len(), 1, "only the request before the refused one");
    assert_eq!(sends[0].1.wr_id & 0xffff, 0, "request 0 of the ring");
    assert!(sends
        .iter()
        .all(|(_, w)| !w.flags.contains(SendFlags::INLINE)));
    assert_eq!(vqp.sends_in_flight(), 1);
    // Fragmented over several QPs, with keys, INLINE is refused all the same.
    let f = Fabric::default();
    let (mut vqp, _vcq) = build(&f, Mode::Dqplb, 4);
    let wr = write(3, 1 << 20).flags(SendFlags::SIGNALED | SendFlags::INLINE);
    assert_eq!(vqp.post_send(&wr), Err(PostSendError::RawInline));
    assert!(f.sends.borrow().is_empty());
    // Without a payload there is nothing to copy: taken as before.
    vqp.post_send(&write(4, 1 << 20)).unwrap();
    let f = Fabric::default();
    let (mut vqp, _vcq) = build(&f, Mode::Spray, 1);
    vqp.post_send(&raw_inline_send(5, 0x10, 0)).unwrap();
    assert_eq!(f.sends.borrow().len(), 1);
}

#[test]
fn a_slice_payload_is_copied_during_the_call() {
    let f = Fabric::default();
    let (mut vqp, mut vcq) = build(&f, Mode::Spray, 1);
    let payload: [u8; 24] = core::array::from_fn(|i| i as u8 * 3);
    // The request's own address, length and flags are replaced by the slice's.
    let wr = raw_inline_send(7, 0x10, 999).flags(SendFlags::SIGNALED);
    vqp.post_send_inline(&wr, &payload).unwrap();
    assert_eq!(f.inline.borrow().as_slice(), &payload);
    let (_, wqe) = f.sends.borrow()[0];
    assert_eq!((wqe.addr, wqe.len), (payload.as_ptr() as u64, 24));
    assert!(wqe.flags.contains(SendFlags::INLINE | SendFlags::SIGNALED));
    f.complete_send(0, WcStatus::SUCCESS);
    let wcs = poll(&mut vcq, &mut vqp);
    assert_eq!(
        (wcs[0].wr_id, wcs[0].byte_len, wcs[0].status),
        (7, 24, WcStatus::SUCCESS)
    );
    // A WRITE over one data QP passes through whole, so it may be inline too.
    let wr = SendWr::new(8, Opcode::RDMA_WRITE, 0, 0, 0x2000, Keys::single(1, 2));
    vqp.post_send_inline(&wr, b"abc").unwrap();
    assert_eq!(&f.inline.borrow()[24..], b"abc");
}

#[test]
fn a_slice_payload_that_cannot_go_now_is_refused_and_nothing_posted() {
    let f = Fabric::default();
    let cfg = Config {
        max_outstanding: 1,
        ..config(Mode::Spray)
    };
    let (mut vqp, _vcq) = build_with(&f, cfg, 1);
    vqp.post_send(&send(1)).unwrap();
    vqp.post_send(&send(2)).unwrap();
    assert_eq!(f.sends.borrow().len(), 1, "request 2 waits for room");
    // QP 0 is full and a request waits: the payload would outlive the borrow.
    assert_eq!(
        vqp.post_send_inline(&send(3), b"late"),
        Err(PostSendError::Full)
    );
    assert_eq!((f.sends.borrow().len(), f.inline.borrow().len()), (1, 0));
    assert_eq!(vqp.sends_in_flight(), 2);
    // Requests that do not pass through whole cannot carry an inline payload.
    let f = Fabric::default();
    let (mut vqp, _vcq) = build(&f, Mode::Spray, 2);
    let keys = Keys::single(1, 2);
    let read = SendWr::new(4, Opcode::RDMA_READ, 0, 0, 0x2000, keys);
    assert_eq!(
        vqp.post_send_inline(&read, b"x"),
        Err(PostSendError::CannotInline(Opcode::RDMA_READ))
    );
    let split = SendWr::new(5, Opcode::RDMA_WRITE, 0, 0, 0x2000, keys);
    assert_eq!(
        vqp.post_send_inline(&split, b"x"),
        Err(PostSendError::CannotInline(Opcode::RDMA_WRITE))
    );
    let odd = SendWr::new(6, Opcode(99), 0, 0, 0, keys);
    assert_eq!(
        vqp.post_send_inline(&odd, b"x"),
        Err(PostSendError::UnknownOpcode(Opcode(99)))
    );
    assert!(f.sends.borrow().is_empty());
}

#[test]
fn an_inline_request_in_flight_on_a_failed_qp_0_is_not_posted_again() {
    let f = Fabric::default();
    let cfg = Config {
        redispatch: true,
        grace_ns: u64::MAX,
        ..config(Mode::Spray)
    };
    let (mut vqp, mut vcq) = build_with(&f, cfg, 2);
    vqp.post_send_inline(&send(1), b"once").unwrap();
    vqp.post_send(&send(2)).unwrap();
    assert!(vqp.fail_qp(100, 0, WcStatus::FATAL_ERR));
    vqp.rejoin(0, MockQp { qpn: 300, f: &f }).unwrap();
    // The peer received neither SEND.
    vqp.resume_seen(0, 0).unwrap();
    // The plain SEND goes again on the replacement; the inline one does not.
    let on_300: Vec<u64, 4> = f
        .sends
        .borrow()
        .iter()
        .filter(|(q, _)| *q == 300)
        .map(|(_, w)| w.wr_id & 0xffff)
        .collect();
    assert_eq!(on_300.as_slice(), &[1], "only request 1 (the plain SEND)");
    assert_eq!(f.inline.borrow().as_slice(), b"once");
    for i in f.signaled() {
        if f.sends.borrow()[i].0 == 300 {
            f.complete_send(i, WcStatus::SUCCESS);
        }
    }
    let wcs = poll(&mut vcq, &mut vqp);
    let got: Vec<(u64, WcStatus), 4> = wcs.iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(
        got.as_slice(),
        &[(1, WcStatus::FATAL_ERR), (2, WcStatus::SUCCESS)]
    );
}

#[test]
fn the_unchecked_post_takes_a_raw_inline_payload_that_may_wait() {
    let f = Fabric::default();
    let cfg = Config {
        max_outstanding: 1,
        ..config(Mode::Spray)
    };
    let (mut vqp, mut vcq) = build_with(&f, cfg, 1);
    let payload = *b"held until posted";
    let wr = raw_inline_send(2, payload.as_ptr() as u64, payload.len() as u64);
    vqp.post_send(&send(1)).unwrap();
    // SAFETY: `payload` lives, unwritten, until the end of the test, past the post.
    unsafe { vqp.post_send_unchecked(&wr) }.unwrap();
    assert!(f.inline.borrow().is_empty(), "waits for QP 0's room");
    f.complete_send(0, WcStatus::SUCCESS);
    let wcs = poll(&mut vcq, &mut vqp);
    assert_eq!(wcs[0].wr_id, 1);
    assert_eq!(f.inline.borrow().as_slice(), &payload);
    // SAFETY: as above.
    let many = unsafe { vqp.post_send_many_unchecked(&[wr]) };
    assert_eq!(many, Ok(()));
}

#[test]
fn a_slice_payload_is_refused_while_data_qp_0_is_being_replaced() {
    let f = Fabric::default();
    let cfg = Config {
        redispatch: true,
        grace_ns: u64::MAX,
        ..config(Mode::Spray)
    };
    let (mut vqp, _vcq) = build_with(&f, cfg, 2);
    assert!(vqp.fail_qp(100, 0, WcStatus::FATAL_ERR));
    // A plain SEND would wait for the replacement; an inline payload cannot.
    assert_eq!(
        vqp.post_send_inline(&send(1), b"held"),
        Err(PostSendError::Full)
    );
    vqp.post_send(&send(2)).unwrap();
    assert_eq!(vqp.sends_in_flight(), 1);
    vqp.restore(0, MockQp { qpn: 300, f: &f }).unwrap();
    vqp.post_send_inline(&send(3), b"now").unwrap();
    assert_eq!(f.inline.borrow().as_slice(), b"now");
}
