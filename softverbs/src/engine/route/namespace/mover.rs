//! The data mover of a request from another process: it copies the request's payload
//! between the requester's memory (`process_vm_readv` / `process_vm_writev`) or its
//! inline bytes and our checked spans. The responder and XRC forwarding both use it.

use std::sync::atomic::{AtomicBool, Ordering};

use vqp_sys::*;

use crate::engine::{MoveError, Mover};
use crate::mem::{self, Span};
use crate::shared::inbox::{iov, Record, F_INLINE};
use crate::shared::sys::{process_copy, CopyError, Range};

/// Moves a request's payload between the requester process and our checked spans.
pub(super) struct RemoteMover<'r> {
    pub(super) pid: u32,
    pub(super) rec: &'r Record,
    pub(super) payload: &'r [u8],
}

/// `EPERM` from `process_vm_*` is reported once.
static DENIED_REPORTED: AtomicBool = AtomicBool::new(false);

fn copy_status(e: CopyError) -> MoveError {
    match e {
        CopyError::Gone => MoveError::Gone,
        CopyError::Denied => {
            if !DENIED_REPORTED.swap(true, Ordering::Relaxed) {
                eprintln!(
                    "vqp-softverbs: process_vm_readv/writev to another process was refused \
                     (EPERM): Yama's kernel.yama.ptrace_scope or a seccomp filter forbids it; \
                     cross-process WQEs complete with IBV_WC_REM_OP_ERR"
                );
            }
            MoveError::Status(IBV_WC_REM_OP_ERR)
        }
        CopyError::Fault => MoveError::Status(IBV_WC_LOC_PROT_ERR),
    }
}

impl RemoteMover<'_> {
    fn remote_ranges(&self, out: &mut [Range; 64]) -> usize {
        let n = (self.rec.n_iov as usize).min(out.len());
        for (i, r) in out.iter_mut().enumerate().take(n) {
            *r = iov(self.payload, i);
        }
        n
    }

    fn copy(&self, local: &[Span<'_>], pull: bool) -> Result<(), MoveError> {
        let mut l = [(0u64, 0u64); 64];
        let mut nl = 0;
        for s in local {
            if nl == l.len() {
                return Err(MoveError::Status(IBV_WC_LOC_PROT_ERR));
            }
            l[nl] = s.range();
            nl += 1;
        }
        let mut r = [(0u64, 0u64); 64];
        let nr = self.remote_ranges(&mut r);
        process_copy(self.pid, &l[..nl], &r[..nr], pull).map_err(|e| {
            // A fault on our side: an on-demand span of ours without the access (the
            // copy into it writes, out of it reads). Else it was the requester's.
            if e == CopyError::Fault && local.iter().any(|s| !mem::accessible(s, pull)) {
                MoveError::Target
            } else {
                copy_status(e)
            }
        })
    }
}

impl Mover for RemoteMover<'_> {
    fn pull(&mut self, dst: &[Span<'_>]) -> Result<(), MoveError> {
        if self.rec.flags & F_INLINE != 0 {
            return mem::copy_from_bytes(dst, self.payload)
                .map(drop)
                .map_err(|_| MoveError::Target);
        }
        self.copy(dst, true)
    }

    fn push(&mut self, src: &[Span<'_>]) -> Result<(), MoveError> {
        self.copy(src, false)
    }

    fn push_bytes(&mut self, bytes: &[u8]) -> Result<(), MoveError> {
        let local = [(bytes.as_ptr() as u64, bytes.len() as u64)];
        let mut r = [(0u64, 0u64); 64];
        let nr = self.remote_ranges(&mut r);
        process_copy(self.pid, &local, &r[..nr], false).map_err(copy_status)
    }
}
