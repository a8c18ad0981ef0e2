//! Send rate limits: a QP that runs at most a given number of send steps per tick,
//! to model paths of different speeds (a tick stands for a fixed span of time).

use super::qp::Pace;
use super::{Nic, SimError};

impl Nic {
    /// The QP with number `qp_num` runs at most `per_tick` steps of its send queue
    /// (executions and RNR attempts) per tick; `None` lifts the limit, `Some(0)`
    /// holds the queue. A new limit takes effect at once, with `per_tick` steps left
    /// in the current tick. Flushes of a QP in error are not limited.
    pub fn set_send_rate(&self, qp_num: u32, per_tick: Option<u32>) -> Result<(), SimError> {
        let mut st = self.state.borrow_mut();
        let i = st.qp_index(qp_num)?;
        st.qps[i].pace = per_tick.map(|per_tick| Pace {
            per_tick,
            left: per_tick,
        });
        Ok(())
    }

    /// Starts a new tick (every rate-limited QP gets its steps per tick back) and
    /// steps until nothing is runnable; returns the number of steps.
    pub fn tick(&self) -> u64 {
        for qp in &mut self.state.borrow_mut().qps {
            if let Some(p) = qp.pace.as_mut() {
                p.left = p.per_tick;
            }
        }
        self.run()
    }
}

#[cfg(test)]
mod tests {
    use crate::{Access, Nic, NicConfig, QpCaps};
    use vqp_core::{Opcode, PhysQp, SendFlags, SendWqe};

    #[test]
    fn a_paced_qp_runs_its_steps_per_tick_and_no_more() {
        let nic = Nic::new(NicConfig::default());
        let caps = QpCaps {
            max_send_wr: 64,
            max_recv_wr: 1,
        };
        let mut cq = nic.create_cq(0, 256).unwrap();
        let mut qps: Vec<_> = (0..4)
            .map(|_| nic.create_qp(0, &cq, &cq, caps).unwrap())
            .collect();
        nic.connect(&qps[0], &qps[1]).unwrap();
        nic.connect(&qps[2], &qps[3]).unwrap();
        let mr = nic.alloc_mr(0, 4096, Access::ALL).unwrap();
        let wqe = SendWqe {
            opcode: Opcode::RDMA_WRITE,
            flags: SendFlags::SIGNALED,
            addr: mr.addr,
            len: 8,
            lkey: mr.lkey,
            remote_addr: mr.at(64),
            rkey: mr.rkey,
            ..SendWqe::default()
        };
        let (slow, fast) = (qps[0].qp_num(), qps[2].qp_num());
        nic.set_send_rate(slow, Some(1)).unwrap();
        nic.set_send_rate(fast, Some(3)).unwrap();
        for q in [0, 2] {
            qps[q].post_send(&[wqe; 10]).unwrap();
        }
        let done = |nic: &Nic| {
            (
                nic.qp_stats(slow).unwrap().executed,
                nic.qp_stats(fast).unwrap().executed,
            )
        };
        // The current tick's steps are there as soon as the rate is set.
        assert_eq!(nic.run(), 4);
        assert_eq!(done(&nic), (1, 3));
        assert_eq!(nic.tick(), 4);
        assert_eq!(done(&nic), (2, 6));
        nic.set_send_rate(fast, None).unwrap();
        assert_eq!(nic.tick(), 5);
        assert_eq!(done(&nic), (3, 10));
        assert_eq!(cq.drain().len(), 13);
    }
}
