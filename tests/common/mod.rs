//! Two virtual QPs connected through the simulated NIC, for end-to-end tests.
#![allow(dead_code)]

use vqp_core::{Config, Keys, Mode, PhysQp, VirtualCq, VirtualQp, Wc};
use vqp_sim::{Access, Mr, Nic, NicConfig, QpCaps, SimCq, SimQp};

/// Up to 16 data QPs, `D` WQEs each (32 unless named), 512 requests per direction, a
/// window for 32 receives per QP.
pub type Vqp<const D: usize = 32> = VirtualQp<SimQp, 16, D, 512, 1024>;
/// One CQ per device, up to two devices.
pub type Vcq = VirtualCq<SimCq, 2, 32>;

/// One endpoint: its virtual QP, virtual CQ, and buffer (registered on every device).
pub struct Side<const D: usize = 32> {
    /// Boxed: the virtual QP is some 175 KB, too large to move around on a test
    /// thread's stack in a debug build.
    pub vqp: Box<Vqp<D>>,
    pub vcq: Vcq,
    pub buf: u64,
    pub mrs: Vec<Mr>,
}

impl<const D: usize> Side<D> {
    /// Keys of this side's buffer as the local side, with `peer`'s as the remote.
    pub fn keys(&self, peer: &Side<D>) -> Keys {
        self.mrs
            .iter()
            .zip(&peer.mrs)
            .fold(Keys::none(), |k, (l, r)| k.with(l.device, l.lkey, r.rkey))
    }

    /// Poll once, appending completions to `into`.
    pub fn poll(&mut self, into: &mut Vec<Wc>) {
        let mut out = [Wc::EMPTY; 16];
        let n = self
            .vcq
            .poll(&mut [&mut *self.vqp], &mut out)
            .expect("simulated CQs never fail to poll");
        into.extend_from_slice(&out[..n]);
    }
}

/// One side's CQs (per device), data QPs and notify QP, before they are built into a
/// virtual QP.
type Queues = (Vec<SimCq>, Vec<(SimQp, u8)>, Option<(SimQp, u8)>);

/// Sender `a` and receiver `b`, data QP `i` of each on device `i % devices`.
pub struct Pair<const D: usize = 32> {
    pub nic: Nic,
    pub a: Side<D>,
    pub b: Side<D>,
    pub len: usize,
}

/// Build a connected pair with `qps` data QPs and buffers of `len` bytes.
pub fn pair(nic: NicConfig, cfg: Config, qps: u32, len: usize) -> Pair {
    pair_with(nic, cfg, qps, len)
}

/// [`pair`] with `D` WQEs of room per data QP.
pub fn pair_with<const D: usize>(nic: NicConfig, cfg: Config, qps: u32, len: usize) -> Pair<D> {
    let nic = Nic::new(nic);
    let devices = nic.config().devices;
    let caps = QpCaps {
        max_send_wr: cfg.max_outstanding,
        max_recv_wr: cfg.recv_depth,
    };
    let spray_notify = cfg.mode == Mode::Spray && qps > 1;
    let cq_len = (qps as usize + 1) * (cfg.max_outstanding + cfg.recv_depth) as usize;
    let mut sides: Vec<Queues> = (0..2)
        .map(|_| {
            let cqs: Vec<SimCq> = (0..devices)
                .map(|d| nic.create_cq(d, cq_len).expect("cq"))
                .collect();
            let data = (0..qps as usize)
                .map(|i| {
                    let d = i % devices;
                    let qp = nic.create_qp(d, &cqs[d], &cqs[d], caps).expect("qp");
                    (qp, d as u8)
                })
                .collect();
            let notify =
                spray_notify.then(|| (nic.create_qp(0, &cqs[0], &cqs[0], caps).expect("qp"), 0));
            (cqs, data, notify)
        })
        .collect();
    let (b_cqs, b_data, b_notify) = sides.pop().expect("two sides");
    let (a_cqs, a_data, a_notify) = sides.pop().expect("two sides");
    for ((qa, _), (qb, _)) in a_data.iter().zip(&b_data) {
        nic.connect(qa, qb).expect("connect");
    }
    if let (Some((qa, _)), Some((qb, _))) = (&a_notify, &b_notify) {
        nic.connect(qa, qb).expect("connect");
    }
    let side = |cqs: Vec<SimCq>, data, notify, qp_num| {
        let mut vqp =
            Box::new(Vqp::<D>::new(Config { qp_num, ..cfg }, data, notify).expect("valid set-up"));
        let mut vcq = Vcq::new();
        for (d, cq) in cqs.into_iter().enumerate() {
            vcq.add_cq(cq, d as u8, cq_len as u32).expect("cq");
        }
        vcq.attach(&mut *vqp).expect("cq sized for the QPs");
        let buf = nic.alloc(len);
        let mrs = (0..devices)
            .map(|d| nic.register_buffer(d, buf, len, Access::ALL).expect("mr"))
            .collect();
        Side { vqp, vcq, buf, mrs }
    };
    let a = side(a_cqs, a_data, a_notify, 1);
    let mut b = side(b_cqs, b_data, b_notify, 2);
    b.vqp.arm_receiver();
    Pair { nic, a, b, len }
}

/// `len` bytes of a pattern that repeats every 4093 bytes (a prime, so fragment
/// boundaries never line up with it), seeded.
pub fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    let block: Vec<u8> = (0..4093)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    let mut v = Vec::with_capacity(len + block.len());
    while v.len() < len {
        v.extend_from_slice(&block);
    }
    v.truncate(len);
    v
}

impl<const D: usize> Pair<D> {
    /// Fail-back of data QP `i`: a fresh QP pair on its device, connected, takes the
    /// place of QP `i` on both sides (the receiver's is taken out first if it still
    /// runs: the pair is replaced whole), each side told how many of its
    /// receive-consuming WQEs the other's old QP received. The old QPs are left in
    /// the error state. False while a side's QP is still flushing the application's
    /// receives (the caller keeps polling).
    pub fn fail_back(&mut self, i: usize) -> bool {
        assert!(self.a.vqp.retire(i) && self.b.vqp.retire(i));
        let (Some(seen_a), Some(seen_b)) =
            (self.a.vqp.receives_seen(i), self.b.vqp.receives_seen(i))
        else {
            return false;
        };
        let (qa, qb) = self.fresh_pair(i % self.nic.config().devices);
        let old = self.a.vqp.rejoin(i, qa).expect("a failed QP");
        let old_b = self.b.vqp.rejoin(i, qb).expect("the peer's QP, failed");
        self.a.vqp.resume_seen(i, seen_b).expect("joining");
        self.b.vqp.resume_seen(i, seen_a).expect("joining");
        let _ = self.nic.fail_qp(old.qp_num());
        let _ = self.nic.fail_qp(old_b.qp_num());
        true
    }

    /// Fail-back of the notify QP (SPRAY): both sides take theirs out (the pair is
    /// replaced whole) and, once both counted every notify that arrived on it (their
    /// receives flushed: the caller keeps polling), a fresh pair on device 0 takes
    /// its place, each side told how many of its notifies the other received. False
    /// while a side is still draining.
    pub fn fail_back_notify(&mut self) -> bool {
        assert!(self.a.vqp.retire_notify() && self.b.vqp.retire_notify());
        let (Some(seen_a), Some(seen_b)) = (self.a.vqp.notifies_seen(), self.b.vqp.notifies_seen())
        else {
            return false;
        };
        let (qa, qb) = self.fresh_pair(0);
        let old_a = self.a.vqp.rejoin_notify(qa).expect("drained");
        let old_b = self.b.vqp.rejoin_notify(qb).expect("drained");
        self.a.vqp.resume_notify(seen_b).expect("joining");
        self.b.vqp.resume_notify(seen_a).expect("joining");
        let _ = self.nic.fail_qp(old_a.qp_num());
        let _ = self.nic.fail_qp(old_b.qp_num());
        true
    }

    /// A fresh QP on device `d` for each side, on that side's CQ of `d`, connected.
    fn fresh_pair(&mut self, d: usize) -> (SimQp, SimQp) {
        let cfg = *self.a.vqp.config();
        let caps = QpCaps {
            max_send_wr: cfg.max_outstanding,
            max_recv_wr: cfg.recv_depth,
        };
        let fresh = |side: &mut Side<D>| {
            let cq = side.vcq.cq_mut(d as u8).expect("cq");
            self.nic.create_qp(d, cq, cq, caps).expect("qp")
        };
        let (qa, qb) = (fresh(&mut self.a), fresh(&mut self.b));
        self.nic.connect(&qa, &qb).expect("connect");
        (qa, qb)
    }
}
