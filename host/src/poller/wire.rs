//! How a [`Request`] travels through the request ring: in one cache line.
//!
//! A [`SendWr`] is 96 bytes, most of them the memory keys of up to four devices and the
//! two atomic operands. A request that carried them all would span two cache lines of
//! the ring, and the poll thread would wait for both, one after the other. So a send
//! travels as its head ([`Item::Send`]: 44 bytes), and what it shares with the send
//! before it stays behind: its keys go ahead in an [`Item::Keys`] only when they differ
//! from the last keys sent on the handle, its atomic operands in an [`Item::Operands`]
//! only when either is non-zero. The poll thread keeps the last keys ([`Assembly`]) and
//! puts the request back together. An application that moves data between the same
//! buffers (the common case: the keys change when the buffers do) sends one line per
//! request.

use vqp_core::{Keys, Opcode, RecvWr, SendFlags, SendWr};

use super::msg::Request;

/// One slot's worth of a request: at most 48 bytes, so that item and stamp share a
/// line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Item {
    /// A send; its keys are the last [`Item::Keys`], its operands the
    /// [`Item::Operands`] just before it (zero without one).
    Send {
        wr_id: u64,
        local_addr: u64,
        len: u64,
        remote_addr: u64,
        opcode: Opcode,
        flags: SendFlags,
        imm_data: u32,
        /// Submitted through [`Handle::send_unchecked`](super::Handle::send_unchecked):
        /// its submitter vouched for an inline payload's address.
        vouched: bool,
    },
    /// A receive, whole.
    Recv(RecvWr),
    /// The keys of this send and of later ones, until the next `Keys`.
    Keys(Keys),
    /// The atomic operands of the next send only.
    Operands { compare_add: u64, swap: u64 },
}

/// A request cut into items: what goes ahead of it (keys, operands), then itself.
#[derive(Debug)]
pub(super) struct Parts {
    /// Keys that differ from the last sent, then non-zero operands.
    pub(super) ahead: [Option<Item>; 2],
    /// The request's own item, last.
    pub(super) last: Item,
}

impl Parts {
    /// How many items go ahead of the request's own.
    #[inline]
    pub(super) fn ahead(&self) -> usize {
        self.ahead.iter().flatten().count()
    }

    /// The keys this request sends, if they go ahead of it.
    #[inline]
    pub(super) fn keys(&self) -> Option<Keys> {
        match self.ahead[0] {
            Some(Item::Keys(k)) => Some(k),
            _ => None,
        }
    }
}

/// Cuts `request` into its items, given the keys last sent on its handle; `vouched`
/// marks a send whose inline payload's address its submitter vouched for.
#[inline]
pub(super) fn split(request: &Request, keys: &Keys, vouched: bool) -> Parts {
    match *request {
        Request::Send(wr) => Parts {
            ahead: [
                (wr.keys != *keys).then_some(Item::Keys(wr.keys)),
                (wr.compare_add | wr.swap != 0).then_some(Item::Operands {
                    compare_add: wr.compare_add,
                    swap: wr.swap,
                }),
            ],
            last: Item::Send {
                wr_id: wr.wr_id,
                local_addr: wr.local_addr,
                len: wr.len,
                remote_addr: wr.remote_addr,
                opcode: wr.opcode,
                flags: wr.flags,
                imm_data: wr.imm_data,
                vouched,
            },
        },
        Request::Recv(wr) => Parts {
            ahead: [None, None],
            last: Item::Recv(wr),
        },
    }
}

/// The poll thread's side of one handle's ring: what earlier items left for later ones.
#[derive(Debug, Default)]
pub(super) struct Assembly {
    keys: Keys,
    compare_add: u64,
    swap: u64,
}

impl Assembly {
    /// Takes one item: the request it completes, or `None` for an item that only
    /// carries something forward.
    #[cfg(test)]
    fn take(&mut self, item: Item) -> Option<Request> {
        self.take_vouched(item).map(|(r, _)| r)
    }

    /// What `take` (a test's helper) gives, with whether the request's submitter vouched for its
    /// inline payload's address (only ever true for a send).
    #[inline]
    pub(super) fn take_vouched(&mut self, item: Item) -> Option<(Request, bool)> {
        match item {
            Item::Send {
                wr_id,
                local_addr,
                len,
                remote_addr,
                opcode,
                flags,
                imm_data,
                vouched,
            } => {
                let wr = SendWr {
                    wr_id,
                    opcode,
                    flags,
                    local_addr,
                    len,
                    remote_addr,
                    imm_data,
                    keys: self.keys,
                    compare_add: self.compare_add,
                    swap: self.swap,
                };
                self.compare_add = 0;
                self.swap = 0;
                Some((Request::Send(wr), vouched))
            }
            Item::Recv(wr) => Some((Request::Recv(wr), false)),
            Item::Keys(keys) => {
                self.keys = keys;
                None
            }
            Item::Operands { compare_add, swap } => {
                self.compare_add = compare_add;
                self.swap = swap;
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn travel(requests: &[Request]) -> Vec<(Request, usize)> {
        let mut sent = Keys::none();
        let mut at = Assembly::default();
        requests
            .iter()
            .map(|r| {
                let parts = split(r, &sent, false);
                if let Some(k) = parts.keys() {
                    sent = k;
                }
                for item in parts.ahead.into_iter().flatten() {
                    assert_eq!(at.take(item), None, "an item ahead completed a request");
                }
                let n = parts.ahead() + 1;
                (at.take(parts.last).expect("the last item completes it"), n)
            })
            .collect()
    }

    #[test]
    fn an_item_and_its_stamp_share_a_cache_line() {
        assert!(core::mem::size_of::<Item>() <= 64 - core::mem::size_of::<usize>());
    }

    #[test]
    fn requests_arrive_whole_and_keys_travel_only_when_they_change() {
        let a = Keys::single(1, 2);
        let b = Keys::none().with(0, 3, 4).with(2, 5, 6);
        let w = |id, keys| SendWr::new(id, Opcode::RDMA_WRITE, 0x1000, 64, 0x2000, keys);
        let mut cas = w(4, a);
        cas.opcode = Opcode::ATOMIC_CMP_AND_SWP;
        cas.compare_add = 7;
        cas.swap = 9;
        let mut fadd = w(6, a).imm(0x0102_0304).flags(SendFlags::NONE);
        fadd.opcode = Opcode::ATOMIC_FETCH_AND_ADD;
        fadd.compare_add = 1;
        let requests = [
            Request::Send(w(1, a)),
            Request::Send(w(2, a)),
            Request::Recv(RecvWr::data(3, 0x3000, 16, 8)),
            Request::Send(cas),
            Request::Send(w(5, a)),
            Request::Send(fadd),
            Request::Send(w(7, b)),
            Request::Send(w(8, Keys::none())),
        ];
        let out = travel(&requests);
        let got: Vec<Request> = out.iter().map(|(r, _)| *r).collect();
        assert_eq!(got, requests);
        let counts: Vec<usize> = out.iter().map(|(_, n)| *n).collect();
        // Keys ahead of the first send and when they change; operands only for atomics
        // with one (the send after an atomic gets zeros back without an item).
        assert_eq!(counts, [2, 1, 1, 2, 1, 2, 2, 2]);
    }
}
