//! Capacities: the six numbers that size a virtual QP and its virtual CQ, fixed at
//! compile time so the data path holds every container inline (no heap) and the
//! compiler checks their invariants.
//!
//! | name | meaning | default |
//! |---|---|---|
//! | `N` | data QPs at most | [`DATA_QPS`] |
//! | `D` | send WQEs tracked per physical QP (≥ `max_outstanding`, a power of two) | [`WQES`] |
//! | `S` | virtual requests in flight per direction (a power of two) | [`SLOTS`] |
//! | `W` | the DQPLB reorder window (a power of two, ≥ `N·D`) | [`WINDOW`] |
//! | `DEVS` | devices, one physical CQ each, the virtual CQ polls (1 to [`MAX_DEVICES`](crate::MAX_DEVICES)) | [`DEVICES`] |
//! | `B` | physical completions the virtual CQ polls at a time | [`BATCH`] |
//!
//! Every type that carries several of them takes them in this one order, a suffix
//! of it at most: [`VirtualQp`](crate::VirtualQp)`<Q, N, D, S, W>`,
//! [`VirtualCq`](crate::VirtualCq)`<C, DEVS, B>`, and in vqp-host `Endpoint`,
//! `Connected` (`<N, D, S, W, DEVS, B>`) and the poll thread's `Stack`
//! (`<Q, C, N, D, S, W, DEVS, B>`). Parts of the virtual QP take only the ones they
//! hold (a lane `D`, the slot rings `S`, the reorder window `W`).
//!
//! Why const generics in one order rather than one type carrying them all: stable
//! Rust sizes an array only by a const generic parameter, never by a trait's
//! associated constant, so a `Capacities` trait could not size the containers the
//! data path keeps inline; and const parameters cannot be of a struct type. The
//! defaults below are what most programs want (`Endpoint` with no parameters);
//! programs that need other sizes name them once, in a type alias of their own.
//! `DEVS` is checked against [`MAX_DEVICES`](crate::MAX_DEVICES) at compile time,
//! so a batch size given where the device count goes (above 4) does not compile.

/// Default `N`: data QPs at most.
pub const DATA_QPS: usize = 8;
/// Default `D`: send WQEs tracked per physical QP.
pub const WQES: usize = 128;
/// Default `S`: virtual requests in flight per direction.
pub const SLOTS: usize = 512;
/// Default `W`: the DQPLB reorder window.
pub const WINDOW: usize = 1024;
/// Default `DEVS`: devices the virtual CQ polls.
pub const DEVICES: usize = 1;
/// Default `B`: physical completions polled at a time.
pub const BATCH: usize = 32;
