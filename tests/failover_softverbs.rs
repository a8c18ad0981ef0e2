//! Re-dispatch and fail-back over in-process softverbs, randomized: data QPs (and in
//! SPRAY the notify QP) of the sender fail after a random number of WQEs, one of them
//! up to all; both modes; WRITE, WRITE_WITH_IMM, READ and (SPRAY) SEND of random sizes.
//! Each failed QP pair is replaced through vqp-host's fail-back messages as soon as
//! seen, the requests held meanwhile: every request is reported once, in posting
//! order, successfully, with its data, and every receive completes once, in order.

use std::time::{Duration, Instant};

use vqp::core::split::SplitPolicy;
use vqp::core::{Config, Keys, Mode, Opcode, RecvWr, RestoreError, SendWr, Wc, WcOpcode};
use vqp::host::failback::NOTIFY_QP;
use vqp::host::{
    AccessFlags, Connected, Context, Endpoint, Error, FailBack, MemoryRegion, Settings, Verbs,
};
use vqp_softverbs::QpSelector;

type Ep = Endpoint<4, 16, 64, 256, 1, 16>;
type Conn = Connected<4, 16, 64, 256, 1, 16>;

/// Bytes per slot: the largest request.
const SLOT: u64 = 96 << 10;
/// Requests in flight at most, one slot each.
const SLOTS: u64 = 6;

/// A small deterministic generator (xorshift), one per scenario.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

struct Side {
    conn: Conn,
    mr: MemoryRegion,
}

impl Side {
    fn bytes(&mut self, at: u64, len: u64) -> &mut [u8] {
        // SAFETY: the slot's request is not in flight (the caller waits for it before
        // touching the slot), and the buffer is ours.
        unsafe { std::slice::from_raw_parts_mut(self.mr.as_ptr().add(at as usize), len as usize) }
    }
}

fn pattern(id: u64, salt: u8, buf: &mut [u8]) {
    buf.iter_mut()
        .enumerate()
        .for_each(|(i, b)| *b = (i as u64 ^ id.wrapping_mul(31)) as u8 ^ salt);
}

fn pair(mode: Mode, qps: usize) -> (Side, Side) {
    // SAFETY: softverbs' table implements the libibverbs ABI.
    let verbs = unsafe { Verbs::from_table(vqp_softverbs::verbs_table()) };
    let pd = |dev: &str| {
        Context::open(&verbs, Some(dev))
            .unwrap()
            .alloc_pd()
            .unwrap()
    };
    let (pa, pb) = (pd("soft0"), pd("soft1"));
    let settings = |qp_num| {
        Settings::new(
            Config {
                split: SplitPolicy::new(8 << 10),
                max_outstanding: 16,
                recv_depth: 16,
                qp_num,
                redispatch: true,
                grace_ns: 30_000_000_000,
                ..Config::new(mode)
            },
            qps,
        )
    };
    let ea = Ep::create(&pa, &settings(0xa), None).unwrap();
    let eb = Ep::create(&pb, &settings(0xb), None).unwrap();
    let (ca, cb) = (ea.card(), eb.card());
    let len = (SLOT * SLOTS) as usize;
    (
        Side {
            conn: ea.connect(&cb).unwrap(),
            mr: pa.register_buffer(len, AccessFlags::ALL_REMOTE).unwrap(),
        },
        Side {
            conn: eb.connect(&ca).unwrap(),
            mr: pb.register_buffer(len, AccessFlags::ALL_REMOTE).unwrap(),
        },
    )
}

/// Replace, through the fail-back messages, every QP pair of which a side's QP failed
/// (the peer's is taken out too); a side still flushing refuses, and the next call
/// offers again.
fn fail_back(a: &mut Side, b: &mut Side) {
    let data = a.conn.vqp.data_qps();
    let failed = |s: &Side, i: usize| {
        if i == data {
            s.conn.vqp.notify_qp_failed()
        } else {
            s.conn.vqp.data_qp_failed(i)
        }
    };
    for i in 0..=data {
        if !(failed(a, i) || failed(b, i)) {
            continue;
        }
        let lane = if i == data { usize::from(NOTIFY_QP) } else { i };
        let offer = match a.conn.offer_rejoin(lane) {
            Ok(m) => m,
            Err(Error::Restore(RestoreError::NotDrained)) => continue,
            Err(e) => panic!("offer for {lane}: {e}"),
        };
        match b.conn.on_failback(offer).unwrap().unwrap() {
            refuse @ FailBack::Refuse { .. } => {
                assert_eq!(a.conn.on_failback(refuse).unwrap(), None);
            }
            answer => {
                let ready = a.conn.on_failback(answer).unwrap().unwrap();
                assert_eq!(b.conn.on_failback(ready).unwrap(), None);
            }
        }
    }
}

#[derive(Clone, Copy, Debug)]
struct Req {
    op: Opcode,
    len: u64,
}

fn scenario(seed: u64) {
    let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    let mode = if rng.below(2) == 0 {
        Mode::Dqplb
    } else {
        Mode::Spray
    };
    let qps = 2 + rng.below(3) as usize;
    let (mut a, mut b) = pair(mode, qps);
    // One to all of the sender's data QPs fail, each after some WQEs; in SPRAY the
    // notify QP too, now and then.
    let failing = 1 + rng.below(qps as u64);
    for _ in 0..failing {
        let victim = a
            .conn
            .vqp
            .data_qp_num(rng.below(qps as u64) as usize)
            .unwrap();
        vqp_softverbs::fail_qp_after(QpSelector::QpNum(victim), rng.below(60));
    }
    if mode == Mode::Spray && rng.below(2) == 0 {
        let notify = a.conn.vqp.notify_qp_num().unwrap();
        vqp_softverbs::fail_qp_after(QpSelector::QpNum(notify), rng.below(8));
    }
    let reqs: Vec<Req> = (0..36)
        .map(|_| {
            let op = match rng.below(if mode == Mode::Spray { 4 } else { 3 }) {
                0 => Opcode::RDMA_WRITE,
                1 => Opcode::RDMA_WRITE_WITH_IMM,
                2 => Opcode::RDMA_READ,
                _ => Opcode::SEND,
            };
            Req {
                op,
                len: 1 + rng.below(SLOT),
            }
        })
        .collect();
    let keys = Keys::single(a.mr.lkey(), b.mr.rkey());
    let why = format!("seed {seed}: {mode:?}, {qps} data QPs, {failing} failing");
    let start = Instant::now();
    let mut out = [Wc::EMPTY; 16];
    for (batch, chunk) in reqs.chunks(SLOTS as usize).enumerate() {
        let first = (batch * SLOTS as usize) as u64;
        let mut receives = Vec::new();
        for (k, r) in chunk.iter().enumerate() {
            let id = first + k as u64;
            let at = k as u64 * SLOT;
            pattern(id, 0, a.bytes(at, r.len));
            pattern(id, 0xa5, b.bytes(at, r.len));
            let recv = match r.op {
                Opcode::RDMA_WRITE_WITH_IMM => Some(RecvWr::notification(id)),
                Opcode::SEND => Some(RecvWr::data(
                    id,
                    b.mr.addr() + at,
                    r.len as u32,
                    b.mr.lkey(),
                )),
                _ => None,
            };
            if let Some(recv) = recv {
                b.conn.vqp.post_recv(&recv).unwrap();
                receives.push((id, *r));
            }
            let wr = SendWr::new(id, r.op, a.mr.addr() + at, r.len, b.mr.addr() + at, keys)
                .imm((id as u32).to_be());
            a.conn.vqp.post_send(&wr).unwrap();
        }
        let (mut sent, mut received) = (Vec::new(), Vec::new());
        while sent.len() < chunk.len() || received.len() < receives.len() {
            for (side, into) in [(&mut a, &mut sent), (&mut b, &mut received)] {
                let c = &mut side.conn;
                let n = c.vcq.poll(&mut [&mut c.vqp], &mut out).unwrap();
                into.extend_from_slice(&out[..n]);
            }
            fail_back(&mut a, &mut b);
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "{why}: stuck in batch {batch}: {} of {} sent, {} of {} received; {:?} / {:?}",
                sent.len(),
                chunk.len(),
                received.len(),
                receives.len(),
                a.conn.vqp.failover(),
                b.conn.vqp.failover()
            );
        }
        for (k, (wc, r)) in sent.iter().zip(chunk).enumerate() {
            let id = first + k as u64;
            assert_eq!((wc.wr_id, wc.status.is_ok()), (id, true), "{why}: {wc:?}");
            let at = k as u64 * SLOT;
            let mut want = vec![0; r.len as usize];
            let got = if r.op == Opcode::RDMA_READ {
                pattern(id, 0xa5, &mut want);
                a.bytes(at, r.len).to_vec()
            } else {
                pattern(id, 0, &mut want);
                b.bytes(at, r.len).to_vec()
            };
            assert!(got == want, "{why}: request {id} ({:?}) data differs", r.op);
        }
        for (wc, (id, r)) in received.iter().zip(&receives) {
            assert_eq!((wc.wr_id, wc.status.is_ok()), (*id, true), "{why}: {wc:?}");
            if r.op == Opcode::SEND {
                assert_eq!((wc.opcode, wc.byte_len), (WcOpcode::RECV, r.len), "{why}");
            } else if mode == Mode::Spray {
                assert_eq!(wc.imm_data, Some((*id as u32).to_be()), "{why}");
            } else {
                assert_eq!(wc.byte_len, r.len, "{why}");
            }
        }
    }
    let f = a.conn.vqp.failover();
    assert!(f.failovers >= 1 && f.restored >= 1, "{why}: {f:?}");
}

#[test]
fn random_failures_are_ridden_out_with_every_request_once_and_its_data() {
    for seed in 1..=40 {
        scenario(seed);
    }
}
