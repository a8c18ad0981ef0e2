//! The bench rig: a 4-QP DQPLB virtual QP over the no-op provider of `vqp-sim`, with
//! its virtual CQ, and the loops the `A` and `B` benches time. `examples/round_trip.rs`
//! includes this file too, so that its instruction counts are of the very same loop.

use std::hint::black_box;
use std::time::{Duration, Instant};

use vqp_core::split::SplitPolicy;
use vqp_core::{Config, Keys, Mode, Opcode, Policy, SendWr, Signaling, VirtualCq, VirtualQp, Wc};
use vqp_sim::noop::{NoopConfig, NoopControl, NoopCq, NoopOrder, NoopQp, RecvMode};

pub type Vqp = VirtualQp<NoopQp, 4, 64, 256, 512>;
pub type Vcq = VirtualCq<NoopCq, 1, 32>;

pub struct Rig {
    pub vqp: Vqp,
    pub vcq: Vcq,
    pub control: NoopControl,
    pub out: [Wc; 32],
}

pub fn noop_cq(order: NoopOrder, recv_mode: RecvMode) -> NoopCq {
    NoopCq::new(NoopConfig {
        capacity: 8192,
        recv_capacity: 4096,
        order,
        recv_mode,
    })
}

pub fn rig(qps: u32, order: NoopOrder, signaling: Signaling, recv_mode: RecvMode) -> Rig {
    striped_rig(qps, order, signaling, recv_mode, Policy::RoundRobin)
}

/// [`rig`] with striping `policy`.
pub fn striped_rig(
    qps: u32,
    order: NoopOrder,
    signaling: Signaling,
    recv_mode: RecvMode,
    policy: Policy,
) -> Rig {
    let cq = noop_cq(order, recv_mode);
    let control = cq.control();
    let data: Vec<(NoopQp, u8)> = (0..qps).map(|i| (cq.create_qp(100 + i), 0)).collect();
    let cfg = Config {
        split: SplitPolicy::new(64 << 10),
        max_outstanding: 64,
        recv_depth: 64,
        signaling,
        policy,
        ..Config::new(Mode::Dqplb)
    };
    let mut vqp = Vqp::new(cfg, data, None).expect("valid set-up");
    let mut vcq = Vcq::new();
    vcq.add_cq(cq, 0, 8192).expect("one CQ");
    vcq.attach(&mut vqp).expect("CQ large enough");
    Rig {
        vqp,
        vcq,
        control,
        out: [Wc::EMPTY; 32],
    }
}

pub fn write(len: u64) -> SendWr {
    SendWr::new(
        7,
        Opcode::RDMA_WRITE,
        0x10_0000,
        len,
        0x20_0000,
        Keys::single(1, 2),
    )
}

impl Rig {
    /// Post `wr` and poll until its completion comes back.
    #[inline]
    pub fn post_complete(&mut self, wr: &SendWr) {
        self.vqp.post_send(wr).expect("accepted");
        loop {
            let n = self
                .vcq
                .poll(&mut [&mut self.vqp], &mut self.out)
                .expect("poll");
            if n > 0 {
                black_box(&self.out[..n]);
                return;
            }
        }
    }

    /// Time `iters` rounds of 32 posts (the completions are collected untimed).
    pub fn posts_alone(&mut self, wr: &SendWr, iters: u64) -> Duration {
        let mut spent = Duration::ZERO;
        for _ in 0..iters {
            let t = Instant::now();
            for _ in 0..32 {
                self.vqp.post_send(black_box(wr)).expect("accepted");
            }
            spent += t.elapsed();
            self.poll_until(32);
        }
        spent
    }

    /// Poll until `n` completions came back.
    pub fn poll_until(&mut self, mut n: usize) {
        while n > 0 {
            n -= self
                .vcq
                .poll(&mut [&mut self.vqp], &mut self.out)
                .expect("poll");
        }
    }
}
