//! vqp-host: the libibverbs binding of vqp.
//!
//! ```text
//!  poller    pinned poll threads: SPSC rings in (requests) and out (events)
//!  endpoint  a virtual QP on one or several devices: QPs, CQs, card, connect
//!  card, exchange   the versioned endpoint card and its TCP exchange
//!  cm        the card through the RDMA connection manager instead: a CM connection
//!            per QP, its piece of the card in the private data
//!  provider  VerbsQp / VerbsCq: vqp-core's PhysQp / PhysCq over the ops table
//!  vqp (virtual QP, virtual CQ)          ← vqp-core, no_std, no FFI
//!  ──────────────────────────────────────────────────────────────
//!  connect   RESET→INIT→RTR→RTS from one Path
//!  verbs     RAII objects: DeviceList, Context, ProtectionDomain, MemoryRegion,
//!            CompletionChannel, CompletionQueue, QueuePair; data path through the
//!            provider's ops table (post_send, post_recv, poll_cq, req_notify_cq)
//!  loader    fills the table of libibverbs functions: dlopen (default), link time
//!            (feature `linked`), or an in-process table (a software provider);
//!            librdmacm's, on demand (loader::cm)
//!  ──────────────────────────────────────────────────────────────
//!  sys       the crate vqp-sys, re-exported: #[repr(C)] mirrors of <infiniband/verbs.h>
//!            (checked against the header), the function table's type, Gid
//! ```
//!
//! # Loading
//! By default nothing links against libibverbs: [`Verbs::load`] opens
//! `libibverbs.so.1` with `dlopen`, or the library named by the environment variable
//! **`VQP_IBVERBS_PATH`** (a file name or a path) when it is set, and resolves every
//! control-path function once, by symbol version. A machine without libibverbs, or without
//! RDMA devices, gets an [`Error`] value ([`Error::LibraryNotFound`],
//! [`Error::NoDevices`]), never a crash. With the feature `linked` the same table is
//! filled at link time from `rdma-sys`; the API is the same.
//!
//! # Set-up
//! Open a device, allocate a PD, register memory, create a CQ and a QP, and connect the
//! QP to a peer whose QP number, PSN and address were exchanged out of band:
//!
//! ```no_run
//! use vqp_host::connect::{self, Address, Path};
//! use vqp_host::{AccessFlags, Context, QpCap, QpInit, Verbs, Wc};
//!
//! # fn main() -> vqp_host::Result<()> {
//! let verbs = Verbs::load()?;
//! let ctx = Context::open(&verbs, None)?; // or Some("mlx5_0")
//! let pd = ctx.alloc_pd()?;
//! let mr = pd.register_buffer(1 << 20, AccessFlags::ALL_REMOTE)?;
//! let cq = ctx.create_cq(256, None, 0)?;
//! let cap = QpCap { max_send_wr: 128, max_recv_wr: 128, max_send_sge: 1, max_recv_sge: 1, max_inline_data: 0 };
//! let qp = pd.create_qp(&QpInit::rc(&cq, cap))?;
//!
//! // Local details for the peer: qp.qp_num(), ctx.query_port(1)?.lid(),
//! // ctx.query_gid(1, 0)?, a PSN, mr.addr() and mr.rkey().
//! let (peer_lid, peer_qpn, peer_psn, my_psn) = (0x12, 0x345, 0, 0);
//! let path = Path::new(1, Address::lid(peer_lid), peer_qpn, my_psn, peer_psn);
//! connect::connect(&qp, &path)?; // RESET → INIT → RTR → RTS
//!
//! // Poll into caller storage; nothing is allocated per call.
//! let mut wcs = [Wc::default(); 16];
//! for wc in cq.poll(&mut wcs)? {
//!     wc.ok()?;
//! }
//! # Ok(())
//! # }
//! ```
//!
//! # A virtual QP over verbs
//! [`Endpoint::create`] makes the physical QPs and their CQ, [`Endpoint::card`]
//! describes them, [`exchange`] swaps cards with the peer over TCP (or [`cm`] through
//! the RDMA connection manager, from an IP address and a port), and
//! [`Endpoint::connect`] checks the peer's card ([`Card::agree`]) and connects
//! everything, returning vqp-core's `VirtualQp` and `VirtualCq` over [`VerbsQp`] and
//! [`VerbsCq`]. A [`PollThread`] can then own them and serve application threads
//! through [`Handle`]s.
//!
//! Posting takes raw `ibv_send_wr` / `ibv_recv_wr` chains ([`QueuePair::post_send`]),
//! because the caller (vqp-core) owns the buffers and decides their lifetime; those
//! calls are `unsafe` with the contract spelled out, and so is [`VerbsQp`]'s
//! `PhysQp::post_send` (vqp-core's
//! [post contract](vqp_core::phys#the-post-contract)). The safe surface hands memory
//! over by registering it ([`ProtectionDomain::register_buffer`] owns the buffer for
//! the region's life; [`ProtectionDomain::register_raw`] is `unsafe`), after which the
//! device checks every address against its key; an inline payload, which the CPU
//! copies unchecked, goes as a slice (`VirtualQp::post_send_inline`) or through an
//! `unsafe` post ([`Handle::send_unchecked`]).
#![deny(unsafe_code, missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(clippy::undocumented_unsafe_blocks)]

pub mod card;
#[allow(unsafe_code)]
pub mod cm;
pub mod connect;
pub mod endpoint;
pub mod enums;
pub mod error;
pub mod exchange;
pub mod failback;
pub mod flags;
#[allow(unsafe_code)]
pub mod loader;
pub mod poller;
pub mod provider;
#[allow(unsafe_code)]
pub mod verbs;

/// The libibverbs ABI (the crate vqp-sys): `#[repr(C)]` structs, constants, the
/// function table's type and [`Gid`], shared with software providers.
pub use vqp_sys as sys;

pub use card::{Capabilities, Card, CardError, PortAddr, QpAddr};
pub use endpoint::{Connected, Endpoint, Settings};
pub use enums::{
    AtomicCap, LinkLayer, Mtu, NodeType, PortState, QpState, QpType, TransportType, WcOpcode,
    WcStatus, WrOpcode,
};
pub use error::{Error, Result};
pub use failback::{FailBack, FailBackError};
pub use flags::{AccessFlags, QpAttrMask, SendFlags, WcFlags};
pub use loader::{Verbs, VerbsTable};
pub use poller::{Event, Handle, Idle, PollThread, PollerConfig, Refusal, Request, Stack, Stats};
pub use provider::{VerbsCq, VerbsQp};
pub use verbs::{
    AsyncEvent, AsyncEventKind, CompletionChannel, CompletionQueue, Context, CqEvent, Device,
    DeviceAttr, DeviceList, EventSubject, Gid, MemoryRegion, PortAttr, ProtectionDomain, QpCap,
    QpInit, QueuePair, SharedReceiveQueue, Wc,
};
