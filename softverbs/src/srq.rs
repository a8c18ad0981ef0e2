//! Shared receive queues: one receive queue that any number of RC QPs of a device take
//! their receives from, and the limit event that tells the application to refill it.
//!
//! The semantics are ConnectX's (mlx5):
//! - a receive is taken by whichever attached QP's SEND (or RDMA WRITE with immediate)
//!   arrives first, and its scatter list is checked against the **SRQ's** protection
//!   domain, which may differ from the QP's;
//! - `ibv_modify_srq` with `IBV_SRQ_LIMIT` arms the limit (a value not below `max_wr`
//!   is `EINVAL`); when a receive is taken and fewer than the limit remain,
//!   `IBV_EVENT_SRQ_LIMIT_REACHED` is raised once and the limit disarms (reads 0), as
//!   the specification's "SRQ limit" (IBA Vol. 1 §10.2.9.4) prescribes;
//! - an SRQ is not resized: `IBV_SRQ_MAX_WR` is `EINVAL`, as in the kernel's
//!   `mlx5_ib_modify_srq` ("resize SRQ not supported");
//! - a QP attached to an SRQ that enters the error state raises
//!   `IBV_EVENT_QP_LAST_WQE_REACHED` and leaves the SRQ's receives alone (they belong to
//!   the SRQ, not to the QP; `qp::QpCore::to_error`);
//! - destroying an SRQ that QPs still use is `EBUSY`.
//!
//! An XRC SRQ ([`XrcSrq`], `ibv_create_srq_ex` with `IBV_SRQT_XRC`) belongs to an XRC
//! domain and has its own CQ and a number (`ibv_get_srq_num`): no QP is attached to it;
//! a request arriving at an XRC receive QP of its domain names it and takes a receive
//! from it, its completion going to the SRQ's CQ.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, MutexGuard};

use vqp_sys::*;

use crate::cq::{event, CtxCore};
use crate::os::lock;
use crate::wqe::{RecvWqe, MAX_QP_WR, MAX_SGE};

/// Receive requests an SRQ holds at most (`max_srq_wr`).
pub(crate) const MAX_SRQ_WR: u32 = MAX_QP_WR;

/// An SRQ's state.
pub(crate) struct SrqCore {
    pub dev: usize,
    /// Protection domain id (the receives' scatter lists are checked against it).
    pub pd: u32,
    pub ctx: Arc<CtxCore>,
    /// Granted sizes.
    pub max_wr: u32,
    pub max_sge: u32,
    /// Address of the `ibv_srq` handed out (for asynchronous events).
    pub handle: AtomicUsize,
    /// QPs attached.
    pub users: AtomicU32,
    /// What an XRC SRQ has beside (`None` for a basic SRQ).
    pub xrc: Option<XrcSrq>,
    inner: std::sync::Mutex<Queue>,
}

/// An XRC SRQ's domain, CQ and number.
pub(crate) struct XrcSrq {
    /// The domain; requests through XRC receive QPs of another domain may not use it.
    pub xrcd: Arc<crate::xrc::XrcdCore>,
    /// Where its receives complete.
    pub cq: Arc<crate::cq::CqCore>,
    /// The number requests name it by (from the machine-wide QP number table, so that
    /// no two SRQs or QPs of the node share one).
    pub srqn: u32,
}

/// The posted receives and the armed limit, under the SRQ's lock.
pub(crate) struct Queue {
    pub rq: VecDeque<RecvWqe>,
    limit: u32,
}

impl SrqCore {
    /// An SRQ with the sizes `attr` asks for (zero is raised to one; beyond the device's
    /// limits is `EINVAL`). The limit starts disarmed (`srq_limit` is ignored at
    /// creation, as `ibv_create_srq(3)` says).
    pub fn new(dev: usize, pd: u32, ctx: Arc<CtxCore>, attr: &ibv_srq_attr) -> Result<Self, i32> {
        if attr.max_wr > MAX_SRQ_WR || attr.max_sge > MAX_SGE {
            return Err(libc::EINVAL);
        }
        Ok(SrqCore {
            dev,
            pd,
            ctx,
            max_wr: attr.max_wr.max(1),
            max_sge: attr.max_sge.max(1),
            handle: AtomicUsize::new(0),
            users: AtomicU32::new(0),
            xrc: None,
            inner: std::sync::Mutex::new(Queue {
                rq: VecDeque::new(),
                limit: 0,
            }),
        })
    }

    /// Makes it an XRC SRQ (counted as a user of its domain and CQ until
    /// [`SrqCore::detach`]).
    pub fn with_xrc(mut self, x: XrcSrq) -> Self {
        x.xrcd.users.fetch_add(1, Ordering::AcqRel);
        x.cq.users.fetch_add(1, Ordering::AcqRel);
        self.xrc = Some(x);
        self
    }

    /// Called when the SRQ is destroyed: an XRC SRQ no longer uses its domain and CQ.
    pub fn detach(&self) {
        if let Some(x) = &self.xrc {
            x.xrcd.users.fetch_sub(1, Ordering::AcqRel);
            x.cq.users.fetch_sub(1, Ordering::AcqRel);
        }
    }

    /// Locks the queue (a responder holds it from the look at the head receive to
    /// its consumption, so two QPs never take the same one).
    pub fn lock(&self) -> MutexGuard<'_, Queue> {
        lock(&self.inner)
    }

    /// Checks a receive's scatter count: more than `max_sge` is `EINVAL`.
    pub fn check_recv(&self, n: u32) -> Result<(), i32> {
        if n > self.max_sge {
            return Err(libc::EINVAL);
        }
        Ok(())
    }

    /// `ibv_post_srq_recv`: appends receives in order until one fails (`ENOMEM` when
    /// the SRQ is full); returns how many were posted.
    pub fn post(
        &self,
        wqes: &mut dyn Iterator<Item = Result<RecvWqe, i32>>,
    ) -> (u32, Result<(), i32>) {
        let mut q = self.lock();
        let mut posted = 0;
        for item in wqes {
            let r = match item {
                Ok(r) => r,
                Err(e) => return (posted, Err(e)),
            };
            if q.rq.len() >= self.max_wr as usize {
                return (posted, Err(libc::ENOMEM));
            }
            q.rq.push_back(r);
            posted += 1;
        }
        (posted, Ok(()))
    }

    /// Takes the head receive (the caller holds `q`, this SRQ's lock) and raises the
    /// limit event when the count fell below an armed limit.
    pub fn take(&self, q: &mut Queue) -> Option<RecvWqe> {
        let r = q.rq.pop_front()?;
        if q.limit != 0 && (q.rq.len() as u32) < q.limit {
            q.limit = 0;
            self.ctx.raise(
                event::SRQ_LIMIT_REACHED,
                self.handle.load(Ordering::Relaxed),
            );
        }
        Some(r)
    }

    /// `ibv_modify_srq`: `IBV_SRQ_LIMIT` arms the limit; `IBV_SRQ_MAX_WR` or an unknown
    /// bit is `EINVAL`.
    pub fn modify(&self, attr: &ibv_srq_attr, mask: i32) -> Result<(), i32> {
        if mask & !IBV_SRQ_LIMIT != 0 || mask & IBV_SRQ_MAX_WR != 0 {
            return Err(libc::EINVAL);
        }
        if mask & IBV_SRQ_LIMIT != 0 {
            if attr.srq_limit >= self.max_wr {
                return Err(libc::EINVAL);
            }
            let mut q = self.lock();
            q.limit = attr.srq_limit;
            // Already below it: the event comes at once, as hardware raises it on
            // arming when the level is under the limit.
            if q.limit != 0 && (q.rq.len() as u32) < q.limit {
                q.limit = 0;
                self.ctx.raise(
                    event::SRQ_LIMIT_REACHED,
                    self.handle.load(Ordering::Relaxed),
                );
            }
        }
        Ok(())
    }

    /// `ibv_query_srq`: the granted sizes and the limit (0 once it fired).
    pub fn query(&self) -> ibv_srq_attr {
        ibv_srq_attr {
            max_wr: self.max_wr,
            max_sge: self.max_sge,
            srq_limit: self.lock().limit,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn srq(max_wr: u32) -> SrqCore {
        let ctx = Arc::new(CtxCore::new(0).unwrap());
        let attr = ibv_srq_attr {
            max_wr,
            max_sge: 2,
            srq_limit: 5,
        };
        SrqCore::new(0, 1, ctx, &attr).unwrap()
    }

    fn recvs(n: u64) -> impl Iterator<Item = Result<RecvWqe, i32>> {
        (0..n).map(|wr_id| {
            Ok(RecvWqe {
                wr_id,
                sges: Default::default(),
            })
        })
    }

    #[test]
    fn sizes_are_checked_and_the_limit_starts_disarmed() {
        let ctx = Arc::new(CtxCore::new(0).unwrap());
        let big = ibv_srq_attr {
            max_wr: MAX_SRQ_WR + 1,
            ..Default::default()
        };
        assert_eq!(
            SrqCore::new(0, 1, Arc::clone(&ctx), &big).err(),
            Some(libc::EINVAL)
        );
        let s = srq(8);
        assert_eq!(
            s.query(),
            ibv_srq_attr {
                max_wr: 8,
                max_sge: 2,
                srq_limit: 0
            }
        );
        assert_eq!(s.check_recv(3), Err(libc::EINVAL));
    }

    #[test]
    fn a_full_srq_refuses_and_receives_come_out_in_order() {
        let s = srq(4);
        assert_eq!(s.post(&mut recvs(6)), (4, Err(libc::ENOMEM)));
        let mut q = s.lock();
        let ids: Vec<u64> = std::iter::from_fn(|| s.take(&mut q))
            .map(|r| r.wr_id)
            .collect();
        assert_eq!(ids, [0, 1, 2, 3]);
    }

    #[test]
    fn the_limit_fires_once_below_it_and_disarms() {
        let s = srq(8);
        assert_eq!(s.post(&mut recvs(4)), (4, Ok(())));
        let limit = |l| ibv_srq_attr {
            srq_limit: l,
            ..Default::default()
        };
        assert_eq!(s.modify(&limit(8), IBV_SRQ_LIMIT), Err(libc::EINVAL));
        assert_eq!(s.modify(&limit(2), IBV_SRQ_MAX_WR), Err(libc::EINVAL));
        s.modify(&limit(3), IBV_SRQ_LIMIT).unwrap();
        assert_eq!(s.query().srq_limit, 3);
        let mut q = s.lock();
        s.take(&mut q); // 3 left: not below
        assert!(s.ctx.take().is_none());
        s.take(&mut q); // 2 left: fires
        drop(q);
        let ev = s.ctx.take().expect("the limit event");
        assert_eq!(ev.kind, event::SRQ_LIMIT_REACHED);
        assert_eq!(s.query().srq_limit, 0, "disarmed");
        let mut q = s.lock();
        s.take(&mut q);
        assert!(s.ctx.take().is_none(), "once");
        drop(q);
        // Arming below the current level fires at once.
        s.modify(&limit(4), IBV_SRQ_LIMIT).unwrap();
        assert_eq!(s.ctx.take().map(|e| e.kind), Some(event::SRQ_LIMIT_REACHED));
    }
}
