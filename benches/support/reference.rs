//! A bench-only baseline built from the reference's data structures: a hash map of
//! active requests, a deque of requests waiting for room and a deque in posting
//! order, a map from physical wr_id to request, a freshly allocated fragment list per
//! request and result vector per poll, every fragment signaled and posted alone; and
//! a `HashMap<u32, bool>` reorder set. It drives the same no-op provider as vqp.

use std::collections::{HashMap, VecDeque};

use vqp_core::{PhysCq, PhysQp, PhysWc, SendFlags, SendWqe, SendWr, Wc, WcStatus};

struct Request {
    wr: SendWr,
    frags: Vec<(u64, u32)>,
    next: usize,
    remaining: usize,
    status: WcStatus,
}

/// The reference's tracking over `qps`.
pub struct RefTracker<Q, C> {
    qps: Vec<Q>,
    outstanding: Vec<u32>,
    cq: C,
    max_frag: u64,
    max_outstanding: u32,
    active: HashMap<u64, Request>,
    pending: VecDeque<u64>,
    order: VecDeque<u64>,
    owner: HashMap<u64, (u64, usize)>,
    next_id: u64,
    next_phys: u64,
    rr: usize,
}

impl<Q: PhysQp, C: PhysCq> RefTracker<Q, C> {
    /// A tracker over `qps` completing on `cq`.
    pub fn new(qps: Vec<Q>, cq: C, max_frag: u32, max_outstanding: u32) -> Self {
        let n = qps.len();
        Self {
            qps,
            outstanding: vec![0; n],
            cq,
            max_frag: u64::from(max_frag),
            max_outstanding,
            active: HashMap::new(),
            pending: VecDeque::new(),
            order: VecDeque::new(),
            owner: HashMap::new(),
            next_id: 0,
            next_phys: 0,
            rr: 0,
        }
    }

    /// Take a request and post what fits.
    pub fn post(&mut self, wr: &SendWr) {
        let id = self.next_id;
        self.next_id += 1;
        let mut frags = Vec::new();
        let mut off = 0;
        while off < wr.len {
            let len = (wr.len - off).min(self.max_frag);
            frags.push((off, len as u32));
            off += len;
        }
        let remaining = frags.len();
        self.active.insert(
            id,
            Request {
                wr: *wr,
                frags,
                next: 0,
                remaining,
                status: WcStatus::SUCCESS,
            },
        );
        self.order.push_back(id);
        self.pending.push_back(id);
        self.dispatch();
    }

    fn dispatch(&mut self) {
        while let Some(&id) = self.pending.front() {
            let req = self.active.get_mut(&id).expect("pending request is active");
            while req.next < req.frags.len() {
                let n = self.qps.len();
                let Some(q) = (0..n)
                    .map(|k| (self.rr + k) % n)
                    .find(|&q| self.outstanding[q] < self.max_outstanding)
                else {
                    return;
                };
                let (off, len) = req.frags[req.next];
                let phys = self.next_phys;
                self.next_phys += 1;
                let (lkey, rkey) = req.wr.keys.get(0).unwrap_or((0, 0));
                let wqe = SendWqe {
                    wr_id: phys,
                    opcode: req.wr.opcode,
                    flags: SendFlags::SIGNALED,
                    addr: req.wr.local_addr + off,
                    len,
                    lkey,
                    remote_addr: req.wr.remote_addr + off,
                    rkey,
                    ..SendWqe::default()
                };
                // SAFETY: the post contract: no INLINE flag, so every address goes with
                // the request's keys, which the device checks.
                unsafe { self.qps[q].post_send(&[wqe]) }.expect("no-op post");
                self.owner.insert(phys, (id, q));
                self.outstanding[q] += 1;
                self.rr = (q + 1) % n;
                req.next += 1;
            }
            self.pending.pop_front();
        }
    }

    /// Poll once and return the requests completed, in posting order.
    pub fn poll(&mut self) -> Vec<Wc> {
        let mut buf = vec![PhysWc::EMPTY; 32];
        let n = self.cq.poll(&mut buf).expect("no-op poll");
        for wc in &buf[..n] {
            if let Some((id, q)) = self.owner.remove(&wc.wr_id) {
                self.outstanding[q] -= 1;
                if let Some(req) = self.active.get_mut(&id) {
                    req.remaining -= 1;
                    if !wc.status.is_ok() && req.status.is_ok() {
                        req.status = wc.status;
                    }
                }
            }
        }
        let mut done = Vec::new();
        while let Some(&id) = self.order.front() {
            if self.active[&id].remaining != 0 {
                break;
            }
            let req = self.active.remove(&id).expect("ordered request is active");
            self.order.pop_front();
            done.push(Wc {
                wr_id: req.wr.wr_id,
                status: req.status,
                opcode: req.wr.opcode.completion(),
                qp_num: 0,
                imm_data: None,
                byte_len: req.wr.len,
            });
        }
        self.dispatch();
        done
    }
}

/// The reference's reorder tracking: a set of arrived sequence numbers.
#[derive(Default)]
pub struct RefReorder {
    arrived: HashMap<u32, bool>,
    next: u32,
}

impl RefReorder {
    /// Record `seq`; returns how many messages completed.
    pub fn arrive(&mut self, seq: u32, notify: bool) -> u32 {
        self.arrived.insert(seq, notify);
        let mut messages = 0;
        while let Some(notify) = self.arrived.remove(&self.next) {
            self.next = (self.next + 1) & 0xff_ffff;
            messages += u32::from(notify);
        }
        messages
    }
}
