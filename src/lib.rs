//! vqp: one virtual RDMA queue pair over several physical RC queue pairs.
//!
//! An RDMA application posts to one [`VirtualQp`](core::VirtualQp); vqp cuts each large
//! RDMA WRITE or READ into fragments that travel on all of its physical RC QPs at once,
//! tells the receiver when a whole message has landed (sequence numbers in the immediate
//! data in DQPLB mode, a trailing notify write in SPRAY mode), and folds the fragments'
//! completions back into one completion per request, in posting order. The data path
//! allocates nothing, takes no lock and makes no system call.
//!
//! # Layers
//! ```text
//!  your threads ──(SPSC rings)──► host::PollThread (optional, pinned to a core)
//!                                        │
//!  core  (no_std, no alloc)              ▼
//!  ┌────────────────────────────────────────────────────────────┐
//!  │ VirtualQp: slot ring · split · dispatch · per-QP chains     │
//!  │ VirtualCq: route by (device, qp_num, wr_id) · in-order report│
//!  └──────────────▲────────────────────────────┬────────────────┘
//!                 │   PhysQp / PhysCq traits   │
//!  host: libibverbs (dlopen, or linked)   softverbs: the same ABI in software
//! ```
//! - [`core`] (`vqp-core`): the algorithms, over the [`PhysQp`](core::PhysQp) and
//!   [`PhysCq`](core::PhysCq) traits.
//! - [`host`] (`vqp-host`): libibverbs objects with RAII owners, QP connection, the
//!   endpoint [`Card`](host::Card) and its TCP [`exchange`](host::exchange), and poll
//!   threads.
//! - [`host::sys`] (`vqp-sys`): the libibverbs C ABI (structs, constants, the function
//!   table's type, `Gid`) that the binding and the software provider both build on.
//! - [`softverbs`] (feature `softverbs`, on by default): a software RDMA device with
//!   the libibverbs ABI, so code written against vqp runs and is tested without a NIC.
//!
//! # The objects
//! | object | what it is |
//! |---|---|
//! | [`host::Verbs`] | the verbs library: `libibverbs.so.1` ([`Verbs::load`](host::Verbs::load)) or [`softverbs::verbs`] |
//! | [`host::Context`], [`host::ProtectionDomain`], [`host::MemoryRegion`] | a device opened, a protection domain, registered memory |
//! | [`host::Endpoint`] | one side's physical QPs and CQ before connection; its [`card`](host::Endpoint::card) describes them to the peer |
//! | [`core::VirtualQp`], [`core::VirtualCq`] | what [`Endpoint::connect`](host::Endpoint::connect) returns: post to the first, poll the second |
//! | [`core::SendWr`], [`core::RecvWr`], [`core::Wc`] | a request, a receive, a completion (one per request) |
//!
//! # One transfer, start to end
//! Two endpoints on softverbs' two devices in one process; between hosts the cards
//! travel over TCP ([`host::exchange`]) and [`Verbs::load`](host::Verbs::load) opens the
//! NIC's library instead.
//! ```
//! # #[cfg(feature = "softverbs")]
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use vqp::core::{Config, Keys, Mode, Opcode, RecvWr, SendWr, Wc};
//! use vqp::host::{AccessFlags, Context, Endpoint, Settings};
//!
//! let verbs = vqp::softverbs::verbs();
//! let (ctx_a, ctx_b) = (
//!     Context::open(&verbs, Some("soft0"))?,
//!     Context::open(&verbs, Some("soft1"))?,
//! );
//! let (pd_a, pd_b) = (ctx_a.alloc_pd()?, ctx_b.alloc_pd()?);
//!
//! // A virtual QP of 4 data QPs per side, DQPLB, 64 KiB fragments.
//! let settings = Settings::new(Config::new(Mode::Dqplb), 4);
//! let a: Endpoint = Endpoint::create(&pd_a, &settings, None)?;
//! let b: Endpoint = Endpoint::create(&pd_b, &settings, None)?;
//! let (card_a, card_b) = (a.card(), b.card());
//! let (mut a, mut b) = (a.connect(&card_b)?, b.connect(&card_a)?);
//!
//! const LEN: usize = 1 << 20;
//! let src = pd_a.register_buffer(LEN, AccessFlags::ALL_REMOTE)?;
//! let dst = pd_b.register_buffer(LEN, AccessFlags::ALL_REMOTE)?;
//!
//! // The receiver learns of the whole message through one notification receive.
//! b.vqp.post_recv(&RecvWr::notification(1))?;
//! let keys = Keys::single(src.lkey(), dst.rkey());
//! let wr = SendWr::new(7, Opcode::RDMA_WRITE_WITH_IMM, src.addr(), LEN as u64, dst.addr(), keys);
//! a.vqp.post_send(&wr)?; // 16 fragments over the 4 data QPs
//!
//! let mut out = [Wc::EMPTY; 4];
//! let (mut sent, mut landed) = (0, 0);
//! let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
//! while sent == 0 || landed == 0 {
//!     sent += a.vcq.poll(&mut [&mut a.vqp], &mut out).map_err(|e| e.to_string())?;
//!     landed += b.vcq.poll(&mut [&mut b.vqp], &mut out).map_err(|e| e.to_string())?;
//!     assert!(std::time::Instant::now() < deadline, "no completion within 10 s");
//! }
//! assert!(out[0].status.is_ok());
//! # Ok(())
//! # }
//! # #[cfg(not(feature = "softverbs"))]
//! # fn main() {}
//! ```
//! `examples/quickstart.rs` is the same with the checks written out; `examples/lat/`
//! serves application threads from pinned poll threads; `examples/write_bw/` is the main
//! job, also between two hosts.
//!
//! # Features
//! - `softverbs` (default): [`softverbs`], the software provider, linked in. Turn default
//!   features off in a build that only ever runs on a NIC.
//! - `linked`: link libibverbs at build time (through `rdma-sys`) instead of opening it
//!   with `dlopen` when [`Verbs::load`](host::Verbs::load) is called; the API is the same.
//!   It excludes `softverbs`: the provider defines the `ibv_*` C functions too (they
//!   make its cdylib a libibverbs), and in a binary linked to libibverbs those would
//!   answer the real library's calls. With `dlopen` the two never meet: the loaded
//!   library resolves its names in itself.
#![deny(missing_docs)]

#[cfg(all(feature = "softverbs", feature = "linked"))]
compile_error!(
    "vqp: features `softverbs` and `linked` exclude each other (the provider's ibv_* \
     functions would stand in for the linked libibverbs); use `default-features = false` \
     with `linked`"
);

pub use vqp_core as core;
pub use vqp_host as host;

/// The software RDMA provider (`vqp-softverbs`), for running and testing code without a
/// NIC: devices `soft0`, `soft1`, … with the libibverbs ABI, in this process.
#[cfg(feature = "softverbs")]
pub mod softverbs {
    pub use vqp_softverbs::*;

    /// The software provider as a [`Verbs`](crate::host::Verbs) library, ready for
    /// [`Context::open`](crate::host::Context::open) (`"soft0"`, `"soft1"`, …).
    pub fn verbs() -> crate::host::Verbs {
        // SAFETY: the provider's table implements libibverbs' ABI over its own objects
        // and is a `'static` of this process.
        unsafe { crate::host::Verbs::from_table(vqp_softverbs::verbs_table()) }
    }
}
