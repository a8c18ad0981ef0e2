//! The checks of a run: completions, destination bytes and the bytes around them.

use vqp_core::{Opcode, Wc, WcOpcode, WcStatus};

use super::{Outcome, Pair, Req};

/// The bytes request `r` read or wrote, on A and on B.
pub fn regions<'a>(p: &'a Pair, r: &Req) -> (&'a [u8], &'a [u8]) {
    let base = if r.op == Opcode::RDMA_READ {
        p.write_len
    } else {
        0
    };
    let range = (base + r.off) as usize..(base + r.off + r.len) as usize;
    (&p.a.bytes()[range.clone()], &p.b.bytes()[range])
}

/// Whether request `r`'s destination holds its source.
pub fn landed(p: &Pair, r: &Req) -> bool {
    let (a, b) = regions(p, r);
    a == b
}

/// Checks a sender completion of request `i` other than its status.
pub fn check_send_fields(p: &Pair, reqs: &[Req], i: usize, wc: &Wc) {
    let what = format!("{:?} {} QPs: send {i}", p.mode, p.qps);
    assert_eq!(wc.wr_id, i as u64, "{what}: reported out of order");
    assert_eq!(wc.opcode, reqs[i].op.completion(), "{what}: opcode");
    assert_eq!(wc.byte_len, reqs[i].len, "{what}: byte_len");
    assert_eq!(wc.qp_num, p.a.conn.vqp.qp_num(), "{what}: qp_num");
    assert_eq!(wc.imm_data, None, "{what}: a send carries no immediate");
}

/// Checks a run in which everything must succeed: every request reported once, in
/// order, successful, with its fields; every receive likewise, with what vqp-core
/// defines for the mode; every destination byte; nothing written between requests;
/// nothing stray, nothing left in flight.
pub fn check_all_ok(p: &Pair, reqs: &[Req], o: &Outcome) {
    let what = format!("{:?} {} QPs over {} devices", p.mode, p.qps, p.devices);
    assert_eq!(o.posted, reqs.len(), "{what}");
    assert_eq!(
        o.sends.len(),
        reqs.len(),
        "{what}: one completion per request"
    );
    for (i, wc) in o.sends.iter().enumerate() {
        check_send_fields(p, reqs, i, wc);
        assert_eq!(
            wc.status,
            WcStatus::SUCCESS,
            "{what}: send {i}: {}",
            wc.status
        );
    }
    assert_eq!(o.recvs.len(), o.recv_for.len(), "{what}: one per receive");
    for (wc, &i) in o.recvs.iter().zip(&o.recv_for) {
        assert_eq!(wc.wr_id, i as u64, "{what}: receives out of order");
        assert_eq!(
            wc.status,
            WcStatus::SUCCESS,
            "{what}: recv {i}: {}",
            wc.status
        );
        assert_eq!(wc.opcode, WcOpcode::RECV_RDMA_WITH_IMM, "{what}: recv {i}");
        assert_eq!(wc.qp_num, p.b.conn.vqp.qp_num(), "{what}: recv {i}");
        assert_eq!(
            (wc.imm_data, wc.byte_len),
            p.expected_recv(reqs[i].len, Req::imm(i)),
            "{what}: recv {i}: (imm_data, byte_len)"
        );
    }
    for (i, r) in reqs.iter().enumerate() {
        assert!(landed(p, r), "{what}: request {i} ({r:?}): data differs");
    }
    check_untouched_gaps(p, reqs);
    for side in [&p.a, &p.b] {
        assert_eq!(side.conn.vcq.strays(), 0, "{what}: stray completions");
        assert_eq!(side.conn.vqp.strays(), 0, "{what}: stray completions");
        assert_eq!(side.conn.vqp.failure(), None, "{what}");
        assert_eq!(side.conn.vqp.sends_in_flight(), 0, "{what}");
        assert_eq!(side.conn.vqp.recvs_in_flight(), 0, "{what}");
    }
}

/// B's write area and A's read area are zero outside the requests' destinations.
pub fn check_untouched_gaps(p: &Pair, reqs: &[Req]) {
    let w = p.write_len as usize;
    let mut b_write = vec![false; w];
    let mut a_read = vec![false; p.a.bytes().len() - w];
    for r in reqs {
        let cover = if r.op == Opcode::RDMA_READ {
            &mut a_read
        } else {
            &mut b_write
        };
        cover[r.off as usize..(r.off + r.len) as usize].fill(true);
    }
    let stray = |bytes: &[u8], cover: &[bool]| {
        bytes
            .iter()
            .zip(cover)
            .position(|(&b, &covered)| !covered && b != 0)
    };
    assert_eq!(
        stray(&p.b.bytes()[..w], &b_write),
        None,
        "B written outside"
    );
    assert_eq!(
        stray(&p.a.bytes()[w..], &a_read),
        None,
        "A read into outside"
    );
}
