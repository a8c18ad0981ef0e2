//! DQPLB sequence numbers across the 2^24 wrap, through the simulated NIC with
//! fragments reordered across QPs.

mod common;

use common::{pair, pattern, Pair};
use vqp_core::seq::SEQ_SPACE;
use vqp_core::split::SplitPolicy;
use vqp_core::{Config, Mode, Opcode, PostSendError, RecvWr, SendWr, Wc, WcOpcode};
use vqp_sim::{NicConfig, ReorderPolicy};

/// Send `messages` WRITE_WITH_IMM requests of `len` bytes in `max_frag` fragments over
/// 4 QPs starting at sequence number `first`; check every notification arrives in
/// order with its length, and the data. Returns the pair for further checks.
fn stream(first: u32, messages: u64, len: u64, max_frag: u32) -> Pair {
    let cfg = Config {
        split: SplitPolicy::new(max_frag),
        max_outstanding: 32,
        recv_depth: 32,
        send_seq: first,
        recv_seq: first,
        ..Config::new(Mode::Dqplb)
    };
    let region = 4096u64;
    let mut p = pair(
        NicConfig {
            seed: 0xd0_91b,
            policy: ReorderPolicy::Random,
            ..NicConfig::default()
        },
        cfg,
        4,
        region as usize,
    );
    let src = pattern(region as usize, 7);
    p.nic.write(p.a.buf, &src).expect("writable");
    let keys = p.a.keys(&p.b);
    let slots = region / len;
    let (mut posted, mut sent, mut received) = (0u64, 0u64, 0u64);
    let mut out = Vec::<Wc>::with_capacity(64);
    while received < messages {
        while posted < messages {
            let off = (posted % slots) * len;
            let wr = SendWr::new(
                posted,
                Opcode::RDMA_WRITE_WITH_IMM,
                p.a.buf + off,
                len,
                p.b.buf + off,
                keys,
            );
            if p.b.vqp.recvs_in_flight() == 64 {
                break;
            }
            match p.a.vqp.post_send(&wr) {
                Ok(()) => {
                    p.b.vqp
                        .post_recv(&RecvWr::notification(posted))
                        .expect("a receive slot per request");
                    posted += 1;
                }
                Err(PostSendError::Full) => break,
                Err(e) => panic!("refused: {e}"),
            }
        }
        p.nic.run_for(97);
        out.clear();
        p.a.poll(&mut out);
        for wc in &out {
            assert_eq!((wc.wr_id, wc.status.is_ok()), (sent, true));
            sent += 1;
        }
        out.clear();
        p.b.poll(&mut out);
        for wc in &out {
            assert_eq!(wc.wr_id, received, "notifications out of order");
            assert!(wc.status.is_ok(), "{}", wc.status);
            assert_eq!(wc.opcode, WcOpcode::RECV_RDMA_WITH_IMM);
            assert_eq!(wc.byte_len, len);
            received += 1;
        }
    }
    let used = (slots.min(messages) * len) as usize;
    let got = p.nic.read_vec(p.b.buf, used).expect("readable");
    assert!(got == src[..used], "destination differs from source");
    let fragments = messages * len.div_ceil(u64::from(max_frag));
    assert_eq!(
        p.b.vqp.recv_seq().get(),
        ((u64::from(first) + fragments) % u64::from(SEQ_SPACE)) as u32
    );
    assert!(
        p.b.vqp.reordered_arrivals() > 0,
        "the NIC reordered nothing"
    );
    p
}

#[test]
fn starts_just_below_the_wrap() {
    stream(SEQ_SPACE - 300, 100, 64, 8);
}

/// More than 2^24 fragments: every sequence number is used and the counter wraps.
#[test]
#[ignore = "long: run in release by .ci/run with --ignored"]
fn a_full_cycle_of_sequence_numbers() {
    let messages = u64::from(SEQ_SPACE) / 16 + 1000;
    let p = stream(0, messages, 64, 4);
    assert!(messages * 16 > u64::from(SEQ_SPACE));
    eprintln!(
        "{} fragments, {} arrived out of order",
        messages * 16,
        p.b.vqp.reordered_arrivals()
    );
}
