//! A cm id's connection state: what the program's calls and the agent thread share.
//! The C struct (`rdma_cm_id`) is written only by the program's own calls; this is the
//! part the agent thread reads and changes when a message arrives or a timer expires.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Instant;

use crate::queue::{Pending, Queue, What};
use crate::wire::{self, Name, Private};

/// Where a connection is, after IB CM's states (IBA 12.9) as rdma_cm uses them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Created, or bound.
    Idle,
    /// `rdma_resolve_addr` waits for its timeout (no local address answered).
    AddrResolving,
    /// Address resolved.
    AddrResolved,
    /// Route resolved.
    RouteResolved,
    /// Listening.
    Listening,
    /// REQ or SIDR_REQ sent, waiting for the reply.
    ReqSent,
    /// REP received, not yet reported.
    RepRcvd,
    /// REQ received (a new id), not yet accepted or rejected.
    ReqRcvd,
    /// REP sent, waiting for the RTU.
    RepSent,
    /// Established.
    Connected,
    /// DREQ sent, waiting for the DREP.
    DreqSent,
    /// Disconnected (DREQ or DREP exchanged, or the peer vanished).
    Disconnected,
    /// Rejected, unreachable or failed.
    Failed,
}

/// The other side of a connection, as its REQ or REP described it.
#[derive(Clone, Copy, Debug)]
pub struct Peer {
    /// Its process socket.
    pub name: Name,
    /// Its communication id.
    pub comm: u32,
    /// Its QP and resources.
    pub conn: wire::Conn,
    /// The private data it sent.
    pub private: Private,
}

/// A listener's bookkeeping.
#[derive(Clone, Debug)]
pub struct Listen {
    /// Its socket's name in the rendezvous directory (the bound name, `addr::bound_name`).
    pub socket: String,
    /// The listener name linked to the same socket once `rdma_listen` was called.
    pub listening: Option<String>,
    /// Whether `rdma_listen` was called (before it, REQs are rejected).
    pub active: bool,
    /// Requests not yet accepted or rejected are limited to this many.
    pub backlog: usize,
    /// Requests now pending.
    pub pending: usize,
}

/// The mutable part.
#[derive(Debug)]
pub struct State {
    /// The phase.
    pub phase: Phase,
    /// The queue its events go to (its channel's).
    pub queue: Arc<Queue>,
    /// The local address (bound or chosen by resolution).
    pub local: Option<SocketAddr>,
    /// The remote address.
    pub remote: Option<SocketAddr>,
    /// The other side, once known.
    pub peer: Option<Peer>,
    /// What this side sent in its REQ or REP.
    pub mine: Option<wire::Conn>,
    /// A timer: what happens then is decided by the phase.
    pub deadline: Option<Instant>,
    /// Set when the id listens (or holds a port).
    pub listen: Option<Listen>,
    /// A passive id's listener.
    pub parent: Option<Arc<Conn>>,
    /// `RDMA_OPTION_ID_AFONLY`.
    pub afonly: bool,
    /// When the TIMEWAIT_EXIT is due, after a disconnection.
    pub timewait: Option<Instant>,
    /// The socket a REQ, REP or DREQ was sent to, while its answer is awaited: the
    /// agent checks that its process is still there.
    pub awaiting: Option<String>,
}

/// One cm id's shared part.
#[derive(Debug)]
pub struct Conn {
    /// Its communication id, unique in the process (never 0).
    pub num: u32,
    /// Its port space (`RDMA_PS_*`).
    pub ps: u32,
    /// Its QP type (`IBV_QPT_*`): the C id's `qp_type`, which a passive id takes from
    /// its listener.
    pub qp_type: u32,
    /// The state.
    state: Mutex<State>,
    /// Events handed to the program and not yet acknowledged.
    unacked: AtomicUsize,
    acked: Mutex<()>,
    acked_cv: Condvar,
    /// Set by `rdma_destroy_id`: reports for it are dropped.
    pub destroyed: AtomicBool,
    /// The address of its `rdma_cm_id` once the program has one (0 before: a new
    /// passive id until its CONNECT_REQUEST is taken).
    pub c_id: AtomicUsize,
}

impl Conn {
    /// A new connection in [`Phase::Idle`].
    pub fn new(num: u32, ps: u32, qp_type: u32, queue: Arc<Queue>) -> Arc<Conn> {
        Arc::new(Conn {
            num,
            ps,
            qp_type,
            state: Mutex::new(State {
                phase: Phase::Idle,
                queue,
                local: None,
                remote: None,
                peer: None,
                mine: None,
                deadline: None,
                listen: None,
                parent: None,
                afonly: false,
                timewait: None,
                awaiting: None,
            }),
            unacked: AtomicUsize::new(0),
            acked: Mutex::new(()),
            acked_cv: Condvar::new(),
            destroyed: AtomicBool::new(false),
            c_id: AtomicUsize::new(0),
        })
    }

    /// The state, locked (a poisoned lock is taken as it is: every update is a few
    /// assignments that leave it consistent).
    pub fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether the id is of a UD port space.
    pub fn is_ud(&self) -> bool {
        self.ps == crate::abi::RDMA_PS_UDP || self.ps == crate::abi::RDMA_PS_IPOIB
    }

    /// Queues an event for the id on its channel.
    pub fn report(self: &Arc<Conn>, st: &State, what: What) {
        st.queue.push(Pending {
            conn: self.clone(),
            what,
        });
    }

    /// One more event handed to the program.
    pub fn handed_out(&self) {
        self.unacked.fetch_add(1, Ordering::AcqRel);
    }

    /// An event acknowledged.
    pub fn acked(&self) {
        let _g = self.acked.lock().unwrap_or_else(|e| e.into_inner());
        self.unacked.fetch_sub(1, Ordering::AcqRel);
        self.acked_cv.notify_all();
    }

    /// Waits until every event handed out was acknowledged, as `rdma_destroy_id` does.
    pub fn wait_acked(&self) {
        let mut g = self.acked.lock().unwrap_or_else(|e| e.into_inner());
        while self.unacked.load(Ordering::Acquire) > 0 {
            g = self.acked_cv.wait(g).unwrap_or_else(|e| e.into_inner());
        }
    }
}
