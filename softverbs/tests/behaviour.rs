//! Behaviour through the verbs ABI: scatter/gather, inline, unsignaled WRs, chains and
//! `bad_wr`, local and receive-side error statuses, RNR, flushes, the QP state
//! machine's masks, CQ overflow, completion channels with poll(2), asynchronous events,
//! injected QP faults and concurrent post/poll. Errors the responder detects are in
//! `responder_errors.rs`; misuse of the verbs in `bad_calls.rs`.
//!
//! Tests here run in parallel in one process, so each uses its own QPs; process-wide
//! settings (reorder policy, links) are tested in their own binaries.

mod common;
#[path = "behaviour/completions.rs"]
mod completions;
#[path = "behaviour/concurrency.rs"]
mod concurrency;
#[path = "behaviour/errors.rs"]
mod errors;
#[path = "behaviour/faults.rs"]
mod faults;
#[path = "behaviour/posting.rs"]
mod posting;
#[path = "behaviour/state_machine.rs"]
mod state_machine;

use common::Side;
use vqp_host::sys::*;
use vqp_host::WcStatus;

fn ops(s: &Side) -> ibv_context_ops {
    // SAFETY: a live context; the provider fills `ops` at open and never changes it.
    unsafe { (*s.ctx.as_raw()).ops }
}

fn statuses(wcs: &[vqp_host::Wc]) -> Vec<(u64, WcStatus)> {
    wcs.iter().map(|w| (w.wr_id(), w.status())).collect()
}
