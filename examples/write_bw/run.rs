//! The two sides of a run: connecting the virtual QPs (here), then the sender's loop
//! (`client`: it posts every message) and the receiver's loop (`server`: it checks
//! what it is told has landed).
//!
//! Buffers hold `slots` messages (`Params::slots`); message i uses slot i mod slots.
//! - write / write_imm: the client fills its slot with the pattern of i just before
//!   posting and writes it to the same slot on the server. The server checks a slot
//!   when it learns message i landed — write_imm: its notification completion; write:
//!   a `D` frame from the client saying the write completed (an RC write completes
//!   at the requester only once the responder has placed it) — and returns credits
//!   (`V` frames); the client never has more than `slots` messages unverified, so no
//!   slot is overwritten before it was checked.
//! - read: the server fills `slots + 1` source slots once (source slot k with the
//!   pattern of k); message i reads source slot i mod (slots + 1) into the client's
//!   slot i mod slots, and the client checks it when the read completes. The two
//!   slot counts are coprime, so a read that did not land leaves data of another key
//!   in the slot and fails the check.

use std::net::SocketAddr;
use std::time::Duration;

use vqp_core::split::SplitPolicy;
use vqp_core::{Config, Keys, Policy, Wc, WcStatus};
use vqp_host::cm::{self, CmConnection, CmListener};
use vqp_host::loader::cm::RdmaCm;
use vqp_host::{AccessFlags, Connected, Endpoint, MemoryRegion, Settings};

use crate::args::{show_bytes, Params};
use crate::device::Device;
use crate::params::MAX_DEVICES;
use crate::wire::{Remote, Wire};
use crate::Fail;

/// Data QPs at most, WQEs per QP, requests in flight, DQPLB window, poll batch,
/// devices.
type Ep = Endpoint<16, 64, 1024, 2048, MAX_DEVICES, 32>;
pub type Conn = Connected<16, 64, 1024, 2048, MAX_DEVICES, 32>;
/// WQEs in flight per physical QP and receives kept posted per QP (the type's `D`).
pub const DEPTH: u32 = 64;

/// One side, connected to its peer.
pub struct Link {
    /// Boxed: the virtual QP's fixed-size state is some hundreds of KB.
    pub conn: Box<Conn>,
    /// The buffer, registered on device 0 (and owning the memory).
    pub mr: MemoryRegion,
    /// Its registrations on devices 1, 2, … (dropped before `mr`, see `Drop`).
    pub more: Vec<MemoryRegion>,
    /// The peer's buffer, checked to be as large as the run needs.
    pub peer: Remote,
    /// The peer's data QP numbers (from its card).
    pub peer_qpns: Vec<u32>,
    /// The peer's notify QP number, in SPRAY.
    pub peer_notify: Option<u32>,
    pub wire: Wire,
    /// The CM connections the QPs came from (`--rdma-cm`): disconnected when the run
    /// ends.
    pub cm: Option<CmConnection>,
}

/// How the endpoint cards are exchanged.
pub enum Cards<'a> {
    /// On the TCP wire.
    Wire,
    /// Through the RDMA connection manager, as the server listening there.
    CmServer(&'a mut CmListener),
    /// Through the RDMA connection manager, as the client, to this address.
    CmClient(SocketAddr),
}

/// The process's librdmacm, loaded on first use.
fn rdmacm() -> Result<RdmaCm, Fail> {
    RdmaCm::load().map_err(|e| Fail::bad(format!("--rdma-cm: {e}")))
}

/// `--rdma-cm` for a server: a CM listener at `addr`.
pub fn cm_listen(addr: SocketAddr) -> Result<CmListener, Fail> {
    CmListener::bind(&rdmacm()?, addr)
        .map_err(|e| Fail::bad(format!("--rdma-cm: cannot listen at {addr}: {e}")))
}

fn host_fail(what: &str) -> impl FnOnce(vqp_host::Error) -> Fail + '_ {
    move |e| Fail::bad(format!("{what}: {e}"))
}

/// Builds the endpoint on `dev`, swaps cards with the peer over `wire`, connects the
/// QPs, registers a buffer of `buf_len` bytes, swaps buffer descriptions and checks
/// that the peer's holds `peer_len` bytes. Everything made here is freed when an
/// error returns (the values drop).
pub fn link(
    devs: &[Device],
    p: &Params,
    stripe: Stripe,
    mut wire: Wire,
    (buf_len, peer_len): (u64, u64),
    qp_num: u32,
    cards: Cards<'_>,
) -> Result<Link, Fail> {
    let cfg = Config {
        split: SplitPolicy::new(p.max_frag),
        max_outstanding: DEPTH,
        recv_depth: DEPTH,
        qp_num,
        policy: stripe.policy,
        redispatch: p.failover,
        // The report gives bytes per data QP and per device.
        count_bytes: true,
        grace_ns: if p.failover {
            u64::try_from(p.grace.as_nanos()).unwrap_or(u64::MAX)
        } else {
            0
        },
        weights: stripe.weights.unwrap_or([1; MAX_DEVICES]),
        ..Config::new(p.mode)
    };
    let dev = &devs[0];
    let mut settings = Settings::new(cfg, p.qps);
    settings.weights_from_ports = stripe.weights.is_none();
    // With --failover the client replaces failed QPs: a peer that cannot answer is
    // refused at card exchange, not found out at the first failure.
    settings.fail_back = p.failover;
    settings.port = dev.ib_port;
    settings.gid_index = dev.gid_index;
    let pds: Vec<_> = devs.iter().map(|d| &d.pd).collect();
    let ep = Ep::create_on(&pds, &settings, &[]).map_err(host_fail(&dev.name))?;
    let mine = ep.card();
    if settings.gid_index.is_none() {
        // A RoCE port without --gid-index: say which GID the endpoint chose.
        for (d, (dev, port)) in devs.iter().zip(&mine.ports).enumerate() {
            if let Some(i) = ep.gid_index(d) {
                eprintln!(
                    "write_bw: {} port {}: GID index {i} ({}), chosen for want of --gid-index",
                    dev.name, dev.ib_port, port.gid
                );
            }
        }
    }
    let timeout = wire.timeout();
    let cm_fail = |e: vqp_host::Error| Fail::bad(format!("--rdma-cm: {e}"));
    let (card, conn, cm) = match cards {
        Cards::Wire => {
            let card = wire.swap_cards(&mine)?;
            let conn = ep.connect(&card).map_err(host_fail(&dev.name))?;
            (card, conn, None)
        }
        // IB CM's order: the server's QPs are ready before its REPs, the client's
        // before its RTUs.
        Cards::CmServer(l) => {
            let card = l.request(&mine, timeout).map_err(cm_fail)?;
            let conn = ep.connect(&card).map_err(host_fail(&dev.name))?;
            let cm = l.accept(&mine, timeout).map_err(cm_fail)?;
            (card, conn, Some(cm))
        }
        Cards::CmClient(to) => {
            let (card, dialled) = cm::connect(&rdmacm()?, to, &mine, timeout).map_err(cm_fail)?;
            let conn = ep.connect(&card).map_err(host_fail(&dev.name))?;
            (card, conn, Some(dialled.establish().map_err(cm_fail)?))
        }
    };
    let peer_qpns = card.data.iter().map(|q| q.qpn).collect();
    let peer_notify = card.notify.map(|q| q.qpn);
    let conn = Box::new(conn);
    let len = usize::try_from(buf_len)
        .map_err(|_| Fail::bad(format!("a {buf_len}-byte buffer does not fit this machine")))?;
    let mr = dev
        .pd
        .register_buffer(len, AccessFlags::ALL_REMOTE)
        .map_err(|e| {
            Fail::bad(format!(
                "cannot register {} on {}: {e}",
                show_bytes(buf_len),
                dev.name
            ))
        })?;
    let mut more = Vec::with_capacity(devs.len() - 1);
    for d in &devs[1..] {
        // SAFETY: `mr`'s memory, which outlives this registration (`Link` drops `more`
        // before `mr`).
        let r = unsafe { d.pd.register_raw(mr.as_ptr(), len, AccessFlags::ALL_REMOTE) }
            .map_err(|e| Fail::bad(format!("cannot register the buffer on {}: {e}", d.name)))?;
        more.push(r);
    }
    let mut more_keys = [0u32; MAX_DEVICES - 1];
    for (k, r) in more_keys.iter_mut().zip(&more) {
        *k = r.rkey();
    }
    let mine = Remote {
        addr: mr.addr(),
        len: buf_len,
        rkey: mr.rkey(),
        more: more_keys,
    };
    let peer = wire.swap_buffers(mine, devs.len())?;
    if peer.len < peer_len {
        return Err(Fail::bad(format!(
            "the peer's buffer ({}) is smaller than this run needs ({})",
            show_bytes(peer.len),
            show_bytes(peer_len)
        )));
    }
    Ok(Link {
        conn,
        mr,
        more,
        peer,
        peer_qpns,
        peer_notify,
        wire,
        cm,
    })
}

impl Link {
    /// The keys of a request on this link: on each device, this side's lkey for the
    /// buffer and the peer's rkey for its buffer.
    pub fn keys(&self) -> Keys {
        let mut k = Keys::single(self.mr.lkey(), self.peer.rkey);
        for (d, r) in self.more.iter().enumerate() {
            k = k.with(d + 1, r.lkey(), self.peer.more[d]);
        }
        k
    }
}

/// What the sender was asked to do.
pub struct Plan {
    pub iters: u64,
    pub duration: Option<Duration>,
    pub progress: bool,
    /// Link events, from the start of the run.
    pub inject: Vec<crate::inject::Injection>,
    /// How the client stripes its fragments.
    pub stripe: Stripe,
}

/// How a side stripes its fragments: the policy and, when given, each device's
/// weight (else the ports' rates weigh them, under the weighted policy).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stripe {
    pub policy: Policy,
    pub weights: Option<[u32; MAX_DEVICES]>,
}

impl Stripe {
    /// Round-robin: what a side that posts no RDMA operation (the server) uses.
    pub const ROUND_ROBIN: Stripe = Stripe {
        policy: Policy::RoundRobin,
        weights: None,
    };
}

/// The error for a virtual QP that failed with `status` after `after` (a count of
/// messages, `Tally`'s phrase).
pub fn qp_failed(status: WcStatus, after: impl std::fmt::Display, more: &str) -> Fail {
    Fail::peer(format!(
        "the virtual QP failed after {after}{more}: {status} (a QP broke or the peer went away)"
    ))
}

/// Polls `conn`'s virtual CQ once into `out`; returns how many completions it wrote.
pub fn poll(conn: &mut Conn, out: &mut [Wc]) -> Result<usize, Fail> {
    conn.vcq
        .poll(&mut [&mut conn.vqp], out)
        .map_err(|e| Fail::bad(e.to_string()))
}

/// `f` (the peer went away), told with how far the run got.
pub fn disconnected(f: Fail, done: u64, what: &str) -> Fail {
    Fail {
        msg: format!("{} mid-run, after {done} messages{what}", f.msg),
        ..f
    }
}
