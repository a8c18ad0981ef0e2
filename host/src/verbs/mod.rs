//! RAII owners of the verbs objects.
//!
//! ```text
//! Verbs ─ DeviceList ─ Device ─▶ Context ─┬─ ProtectionDomain ─┬─ MemoryRegion
//!                                         │                    └─ QueuePair ──┐
//!                                         ├─ CompletionChannel ◀─ CompletionQueue
//!                                         └─────────────────────────────────┘
//! ```
//!
//! Every child holds an `Arc` to its parents' inner state, so a parent is released only
//! after its last child: dropping a `Context` while a QP lives merely drops a reference.
//! Each object releases its own verbs resource in `Drop` (destroy/dealloc/close) and then
//! its references, which gives rdma-core the order it requires: QP before its CQs and PD,
//! MR before its PD, CQ before its completion channel, all before the context, the
//! context before the library is unloaded.
//!
//! Errors from the release calls cannot be returned from `Drop`; they are ignored (the
//! kernel reclaims the resources when the process exits).

mod attr;
mod channel;
mod context;
mod cq;
mod device_list;
mod event;
mod mr;
mod pd;
mod qp;
mod srq;
mod wc;

pub use attr::{DeviceAttr, PortAttr};
pub use channel::{CompletionChannel, CqEvent};
pub use context::Context;
pub use cq::CompletionQueue;
pub use device_list::{Device, DeviceList};
pub use event::{AsyncEvent, AsyncEventKind, EventSubject};
pub use mr::MemoryRegion;
pub use pd::ProtectionDomain;
pub use qp::{QpCap, QpInit, QueuePair};
pub use srq::SharedReceiveQueue;
pub use vqp_sys::Gid;
pub use wc::Wc;

// Every owner may move to, and be shared with, other threads: libibverbs is thread-safe
// (each `unsafe impl` carries its reason). Borrowing views stay on their owner's thread.
static_assertions::assert_impl_all!(crate::loader::Verbs: Send, Sync, Clone);
static_assertions::assert_impl_all!(DeviceList: Send, Sync);
static_assertions::assert_impl_all!(Context: Send, Sync, Clone);
static_assertions::assert_impl_all!(ProtectionDomain: Send, Sync, Clone);
static_assertions::assert_impl_all!(MemoryRegion: Send, Sync);
static_assertions::assert_impl_all!(CompletionChannel: Send, Sync, Clone);
static_assertions::assert_impl_all!(CompletionQueue: Send, Sync, Clone);
static_assertions::assert_impl_all!(QueuePair: Send, Sync);
static_assertions::assert_not_impl_any!(CqEvent<'static>: Send, Sync);
