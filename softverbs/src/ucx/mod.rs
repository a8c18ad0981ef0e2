//! UCX's UCP, loaded at run time: the transport that will carry softverbs' traffic to
//! processes on other machines (issue 29), and the plan for wiring it into the engine.
//!
//! # What is here
//! - [`sys`]: the C declarations of UCP 1.13 softverbs needs and [`Ucp`], the table of
//!   its functions, filled once per process by `dlopen("libucp.so.0")` (Debian's
//!   `libucx0`). Nothing links against UCX: on a machine without it everything builds
//!   and runs as before, and [`Ucp::get`] returns [`LoadError::Open`] naming the
//!   library. `tests/ucx_h.rs` checks the declarations against `<ucp/api/ucp.h>`
//!   (`libucx-dev`): sizes, offsets, constants and every function's C type.
//! - [`Worker`]: one UCP context and worker (active messages and wake-up), owning
//!   everything made through it: listeners on socket addresses (port 0 allowed,
//!   [`Worker::listener_addr`] reports the bound one), endpoints to socket addresses
//!   with peer-failure handling (UCP's error callback becomes [`Event::EndpointFailed`]
//!   with [`Error::EndpointFailed`], and every later send on that endpoint fails, so
//!   nothing waits on a dead peer), active messages sent with a header and a payload
//!   ([`Worker::am_send`], exactly one [`Event::Sent`] each), receive handlers per
//!   message id ([`Worker::set_handler`]) that see eager data in place and fetch
//!   rendezvous data into a caller's buffer ([`Rndv::receive`], [`Rndv::receive_raw`]),
//!   or keep it at the sender past the handler to fetch or discard later
//!   ([`Rndv::defer`], [`Worker::receive_deferred`], [`Worker::release`]; the sender's
//!   send completes only then); payloads gathered from and scattered into segment
//!   lists without a copy ([`Worker::am_send_raw`], [`Rndv::receive_iov_raw`]: an SGE
//!   list on either side); and progress: [`Worker::progress`], or [`Worker::wait`]
//!   sleeping on the worker's event fd ([`Worker::event_fd`], [`Worker::arm`]).
//!
//! - [`lookup`]: discovery's question and answer over the well-known lookup port
//!   (below, "Finding the process…"): the client ([`lookup::lookup`]) and the
//!   listener shared with `SO_REUSEPORT` ([`lookup::Listener`]), each step bounded in
//!   time, the listener never waiting on a peer (a fixed table of non-blocking
//!   connections, each advanced by the bytes ready). `crate::transport`'s machine
//!   thread serves it in every process with a RoCE-bound device, answering from the
//!   namespace's registry and the owner's exported UCX listener port, and asks it for
//!   the engine's UCX route.
//! - [`wire`]: the request and response headers of verbs over UCP, each field checked
//!   when read; the engine's UCX route (`engine::route`'s `ucx`) sends and reads them.
//!
//! The worker's parts are three modules: `worker` (context, worker, state, events,
//! progress), `endpoint` (listeners and endpoints) and `am` (handlers, messages, sends
//! and rendezvous receives), each with the UCP callbacks of its part.
//!
//! Ids ([`EpId`], [`ListenerId`]) name objects in the worker's tables, so the worker is
//! the only owner and the only door to UCP: it is `Send` (UCP's worker is made
//! `UCS_THREAD_MODE_SERIALIZED`), not `Sync`, and every UCP callback runs inside a call
//! made through `&mut Worker`. Callbacks never unwind into C (a panicking handler is
//! caught and reported by the next [`Worker::progress`]). `unsafe` is confined to this
//! module's FFI calls and callbacks.
//!
//! # Verbs over UCP between machines
//! A QP whose destination GID belongs to no device of the local softverbs namespace is
//! served through this transport: `engine::route`'s `ucx` (requester, responder, timer)
//! over `crate::transport`'s `machine` (the worker, lookups, endpoints, and the thread
//! that runs them). The design below is what they follow; where what is built departs
//! from it, or does less, it says so ("Built:").
//!
//! ## The responder executes (active messages, not one-sided put/get)
//! Every verbs request travels as an active message to the process that owns the
//! destination QP, whose engine executes it exactly as it executes a request from
//! another local process (`engine::route`'s namespace route today): QP state, PD, rkey,
//! bounds, access flags (MR, window and the QP's own remote-access flags), RNR with
//! `min_rnr_timer`, the receive queue or SRQ, completions on the responder's CQs, and
//! the QP going to error on a remote access error. One-sided
//! `ucp_put_nbx`/`ucp_get_nbx` with packed UCP rkeys would bypass all of it: the
//! requester would write a QP's memory after the responder moved the QP to ERR or
//! reset, after `ibv_dereg_mr` (a cached rkey writing into memory the process has freed
//! — a memory-safety hazard for the responder, not just a semantic gap), or through a
//! QP whose `qp_access_flags` forbid it; every MR would need `ucp_mem_map` and an rkey
//! exchanged and invalidated across machines; and WRITE_WITH_IMM, SEND and atomics need
//! a message to the responder anyway. The cost: the responder's CPU must progress
//! (softverbs already runs a progress thread when nobody polls), a request is a message
//! rather than NIC-offloaded RDMA on machines where UCX has an RDMA transport, and READ
//! is a request and a response instead of a `get` (also one round trip). Over TCP — the
//! transport between machines without RDMA NICs, the case softverbs serves — the
//! difference vanishes: UCX's `tcp` transport has no get and no atomics (`ucx_info -d`:
//! `put_zcopy` and `am_*` only), so UCP emulates them with messages, and its put is
//! data on a socket that the target's own UCX progress copies into place: the
//! responder's CPU does the work either way.
//!
//! | verbs | request (active message) | response |
//! |---|---|---|
//! | SEND, SEND_WITH_IMM, UD send | header (QPNs, PSN, opcode, imm, length; UD: Q_Key, source GID) + payload | ACK or NAK (RC); none (UC, UD) |
//! | RDMA WRITE(_WITH_IMM) | header (+ rkey, address) + payload, received straight into the checked MR range | ACK or NAK (RC); none (UC) |
//! | RDMA READ | header (rkey, address, length) | the data (a rendezvous from the responder's MR into the requester's SGEs), or NAK |
//! | FETCH_ADD, CMP_SWP | header (rkey, address, operands) | the original value, or NAK |
//!
//! Payloads up to UCX's rendezvous threshold arrive eager and are copied out in the
//! handler; larger ones arrive as a rendezvous descriptor that the responder fetches
//! straight into the destination it checked ([`Rndv::receive_raw`] into the MR, or the
//! receive WQE's SGE list with [`Rndv::receive_iov_raw`]), and the requester sends
//! from its SGEs with [`Worker::am_send_raw`] — no copy of a large payload in between.
//! A request the responder refuses before fetching (NAK) leaves the payload at the
//! sender.
//!
//! ## Finding the process that serves QP *n* at GID *g*
//! No daemon is started by hand:
//! - every process that opens a context on a RoCE-bound device creates its [`Worker`]
//!   and listens on each bound interface address at an ephemeral port, and records the
//!   port in its exports in its softverbs namespace (beside the RoCE GIDs it publishes
//!   there today);
//! - every such process also opens a plain TCP socket at a well-known lookup port (one
//!   number for the whole system, `VQP_SOFT_UCX_PORT` to change it) on the same
//!   addresses with `SO_REUSEPORT`. The kernel lets only sockets of the same effective
//!   user share the port, and hands each lookup connection to one of them; any process
//!   of the namespace can answer, because the answer comes from the shared registry
//!   (QP number → owning pid, already machine-wide) and the owner's exports (its UCX
//!   port). A lookup is one fixed-size request ("QPN *n* at GID *g*") and one
//!   fixed-size answer (the address and port, or "nobody"), over a connection that is
//!   closed after it, each bounded in time;
//! - no election and no takeover: while any process of the namespace lives, the port is
//!   served; when the one that took a connection dies mid-lookup, the connection resets
//!   and the requester asks again;
//! - the requester caches (GID, QPN) → endpoint, one UCP endpoint per pair of
//!   processes shared by all their QPs; the cache entry goes when the endpoint fails.
//!   The lookup runs when the QP moves to RTR (so the first post does not wait on it)
//!   and again after a failure.
//!
//! Built: the lookup and its serving as above, by the machine thread of every process
//! with a RoCE-bound device (it makes the worker outside every provider lock, listens
//! for UCX at one port on the bound interfaces' IPv4 and global IPv6 addresses, and
//! answers lookups at each of their addresses as soon as it wakes on their sockets);
//! the requester's cache of endpoints by (GID, QPN) and by the peer's address. The
//! lookup runs at the first post rather than at RTR, on a thread of its own, the WQE
//! waiting for it one ACK timeout at most.
//!
//! IPv6 GIDs: a global one is served as an IPv4 one is. A link-local one (the default
//! GID, index 0) is looked up at that address scoped to the interface of the
//! requester's own port, but UCX cannot carry traffic by it: UCX 1.13's wire-up
//! connects its TCP lanes back to the address a connection came from without the
//! scope (`connect(… fe80::…)`: `EINVAL`). So the lookup listener at a link-local
//! address answers with another address of the same interface (its first IPv4
//! address, else its first global IPv6 one; with neither it does not listen), and the
//! requester takes that answer only if the kernel sends to it from the interface it
//! asked through. An address still tentative (duplicate address detection, a second
//! or two after a link comes up) is listened at once it can be bound, tried every
//! 200 ms with a socket of our own first, so that UCX logs no failed listen.
//!
//! Failure cases, and what the requester sees: no process of the namespace alive on
//! that machine (refused), no such QP ("nobody"), its owner dead between lookup and
//! connect (endpoint error), the machine unreachable (connect timeout): each is what a
//! request lost on the wire is between local processes today — retransmitted (looked
//! up and connected again) until the QP's `timeout` × `retry_cnt` runs out, then
//! `IBV_WC_RETRY_EXC_ERR`. Another program — or another user — holding the well-known
//! port keeps this machine's QPs unreachable from elsewhere (reported on stderr when the
//! bind fails) and can answer lookups with a wrong port: that sends the requester's own
//! request data to the wrong place, the exposure of any unauthenticated RoCE fabric,
//! and nothing on this machine. Two softverbs namespaces of one user on one interface
//! address would share the lookup port and answer from the wrong registry half the
//! time: they must use different lookup ports, which nothing checks yet (a lock file
//! per address and port, outside the namespaces, would).
//!
//! ## Order, ACKs and completions
//! UCP does not promise that active messages on one endpoint are handled in the order
//! sent (several lanes, eager next to rendezvous), so order per QP is ours: every
//! request carries the QP's PSN, and the responder executes strictly in PSN order. An
//! early request waits in a fixed-size window per QP (a constant of the protocol, as a
//! NIC bounds what it tracks out of order); rendezvous payloads wait as descriptors
//! ([`Rndv::defer`]), not copies; a request outside the window is dropped, as a NIC
//! drops an out-of-sequence packet, and the requester's retransmission brings it. The
//! requester, for its part, keeps no more in flight per QP than that window. A duplicate
//! (a PSN already executed, after a retransmission) is acknowledged again without being
//! executed again; READ re-reads, an atomic answers from the last results kept per QP
//! (as a ConnectX keeps its `max_dest_rd_atomic` responder resources).
//!
//! An RC WQE completes at the requester when the responder has taken it: on the ACK
//! (coalesced: one ACK per progress batch names the highest PSN executed), the READ
//! response or the atomic's value — the same point as between local processes. A NAK
//! carries the syndrome (RNR with the responder's timer, remote access, invalid request,
//! remote operation) and becomes the completion status the local path gives. UC and
//! UD complete when UCP has taken the send ([`Event::Sent`]); what the responder
//! cannot take is dropped.
//!
//! Built: strict PSN order with no window (a request out of sequence is dropped and
//! comes again with the requester's retransmission from its oldest unanswered WQE,
//! one local ACK timeout later: over UCX's TCP transport a fresh endpoint's first two
//! messages have been seen handed over in the wrong order, now and then; a
//! connection's sequence starts at PSN 0 at both ends); a duplicate
//! SEND or WRITE re-acknowledged, a READ re-read, a duplicate atomic answered with
//! the result kept for its PSN (the QP's last `max_dest_rd_atomic` atomics; one older
//! than those is dropped, and its requester ends in `IBV_WC_RETRY_EXC_ERR`); one ACK
//! per request, not coalesced; at most 64 requests in flight per QP; a UC WQE
//! completes on its responder's answer, which it gets whatever became of the request
//! (completing on `Event::Sent` would let a sender that exits at once lose data still
//! queued while UCP connects), or after the ACK timeout. Every message is eager on this
//! worker (`RNDV_THRESH=inf`). An RC WRITE longer than [`wire::FRAGMENT`] goes in
//! pieces of that size once its QP has had an answer, each a request with the WQE's
//! PSN and the piece's offset: the responder runs them in order (a piece out of order
//! is dropped, and the requester's retransmission sends the whole WQE again) and
//! answers the last; each fits one of UCX's receive segments, so the handler reads it
//! where UCX received it. A longer SEND, and a READ's data, UCP puts together before
//! the handler. The payload is copied out of the WQE's buffers at the requester and
//! out of UCX's buffer into a queue at the responder (the handler only queues): no
//! rendezvous into the checked destination yet. A UD datagram completes once `ucp_am_send_nbx` took it
//! and is never answered (a sender that exits at once can lose it while UCP
//! connects). XRC is not carried.
//!
//! ## A dead or unreachable peer
//! The requester's timer does not depend on UCX noticing anything. It is the one the
//! local path uses (`qp::transport_timeout` and `qp::ack_timeout`: 4.096 µs ·
//! 2^`timeout` per attempt, `retry_cnt` retransmissions, the whole clamped to
//! 5 ms … 4 s, `timeout` 0 — infinite in the specification — taken as 4 s): the oldest
//! unacknowledged WQE is retransmitted at each ACK timeout, and when the retries are
//! spent it completes with `IBV_WC_RETRY_EXC_ERR`, the QP goes to error and the rest
//! flush. An endpoint failure changes only the path of the next retransmission — a new
//! lookup and a new endpoint, which fail at once while the peer is dead — so a killed
//! peer process (its TCP connections reset: the endpoint fails within milliseconds,
//! tested, and no send on it waits), a peer machine that vanished without a reset (a
//! deleted veth, a cable: nothing answers) and a live responder that stopped
//! progressing all end the same way, after the QP's timeout × retries and never later.
//! UCX's keepalive (`UCX_KEEPALIVE_INTERVAL`, 20 s by default) only tidies endpoints.
//! Unlike the local path, the requester cannot tell a slow live responder from a dead
//! one (there is no lock to probe), so across machines the timer alone decides, as on
//! a real RC fabric; the responder's progress thread must acknowledge promptly.
//!
//! Built as written; a lookup that hangs (an unreachable machine) can hold the WQE one
//! ACK timeout before it counts as the first lost attempt, so that case ends within
//! twice the QP's timeout × retries. Tested with a peer killed by `SIGKILL`, one
//! stopped by `SIGSTOP`, and the veth between the two deleted under WRITEs in flight
//! (the requester's port goes down with its interface, and the WRITEs end at once)
//! (`tests/machine.rs`).
//!
//! ## What a hostile peer cannot do
//! Whatever listens for other machines is exposed to anything that can reach the port:
//! - every message is checked before it is acted on: a known id, a header of exactly
//!   its type's size and version, lengths that agree with the payload and are within
//!   the QP's limits (MTU for UD, `max_msg_sz` otherwise), a destination QP that
//!   exists, is of the right type and state and is connected to the sender (the source
//!   QPN it names, and the endpoint it came on, match the QP's remote address — so no
//!   message reaches a QP its sender was not given) — else it is dropped and counted,
//!   never a panic;
//! - memory is reached only through the responder's own checks (rkey, PD, bounds,
//!   access): a peer names only keys and ranges it was given, as on a RoCE fabric;
//! - memory is bounded: a fixed window per QP, rendezvous payloads fetched only into
//!   checked destinations (never into a buffer sized by the peer), eager payloads no
//!   larger than UCX's eager limit, handlers that never allocate by a peer's length;
//! - time is bounded: a rendezvous fetch that does not complete (a stalling sender)
//!   holds its QP's window slot only until the QP's timer; an endpoint is closed when
//!   it fails; a peer that floods a QP meets its window, not other QPs' resources;
//! - the header size limit ([`MAX_HEADER`]) and id range ([`MAX_AM_ID`]) are enforced
//!   by this module; UCP drops a message of an id with no handler (a rendezvous one
//!   fails at its sender; tested) — but writes a log line for each, so a peer sending
//!   such messages fills the process's stderr. The wiring registers a silent,
//!   counting handler for every id below [`MAX_AM_ID`] that the protocol does not use;
//!   not yet done: UCX's log level for ids beyond.
//!
//! Built: headers checked field by field ([`wire`]) and a malformed one dropped; a
//! destination QP that exists, is in RTR or RTS, and is connected to the GID and QPN
//! the request names (the endpoint it came on is not checked against them); memory
//! only through the responder's checks; a rendezvous message, or one of an id the
//! protocol does not use (below [`MAX_AM_ID`]), dropped with a count and no word on
//! stderr; what the handlers queue for the engine between two turns bounded in
//! messages and bytes (past it a message is dropped and counted; its requester sends
//! it again); a fuzz of the service (`tests/machine.rs`). Not yet: a bound on one
//! message (an eager payload is as large as the sender made it: UCP reassembles it
//! before the handler sees it).
//!
//! What none of the above reaches is UCX itself, which runs before any handler of ours
//! and trusts whoever connects to it:
//! - **UCX's TCP transport** (the one that carries the route; between machines
//!   without RDMA NICs it is UCX's only one) carries out a PUT request at whatever
//!   address its peer names, for anyone who connects to the TCP socket it listens at
//!   and opens with its eight-byte magic number and a connection request: no UCP
//!   endpoint, key or registration is involved (UCX 1.13.1 `src/uct/tcp/tcp_ep.c`,
//!   `uct_tcp_ep_handle_put_req`: `memcpy((void*)put_req->addr, …)`; its memory
//!   domain has no registration, a key *is* the address). A stranger on the network
//!   can so write any byte of a process that carries the route; and one frame of an id
//!   the transport does not have aborts the process (Debian's UCX is built with its
//!   assertions on; without them, a frame longer than the receive segment overruns it,
//!   as `uct_tcp_ep_progress_am_rx` checks the length by assertion only). Both are
//!   shown by `tests/ucx_transport.rs`' `a_stranger_…` tests, and are unchanged in
//!   UCX 1.22.0 and its main branch of August 2026. UCP's features do not reach this
//!   layer: a route over UCP streams rather than active messages would not close it.
//! - **UCP's active messages**: the first fragment of a multi-fragment message makes
//!   `ucp_am_long_first_handler` allocate the total its footer declares, and
//!   `ucp_am_long_middle_handler` copies a middle fragment to the offset its header
//!   names without checking it against that total; `ucp_am_handler_common` reads the
//!   handler table at the message's id before checking the id against the table's
//!   length (1.13.1 `src/ucp/core/ucp_am.c`; the reassembly the same in 1.22.0).
//!
//! Nor does the route authenticate who a peer is: a lookup's answer names the process
//! serving a QP, and a process that connected names its own UCX port in its first
//! message (`transport::machine`'s `HELLO`), after which this process sends its own
//! requests for that address on the connection it accepted. A process on the same
//! host as another can so receive requests meant for it, as it could by answering a
//! lookup first.
//!
//! So the route is for networks whose hosts are trusted with UCX, as UCX's own users
//! (MPI jobs) are — and every user of those hosts, since a local process can connect
//! to the socket as well — and should be kept on interfaces only they reach: it
//! listens on the bound interfaces only (`NET_DEVICES`), never on every address of the
//! machine.
//! Meeting the requirement that a hostile peer cannot hurt the service needs a UCX
//! whose TCP transport takes a put only into memory its owner registered and treats a
//! malformed frame as the connection's error rather than an assertion — or carrying
//! the payload on a transport of softverbs' own, which this design excludes.
//!
//! ## What the wiring needs from the layers
//! The transport sits beside `shared` in layer 5 and reaches the engine the way
//! `shared` does: through an interface it is handed. What the engine will need:
//! - downward (engine → transport): `route(gid, qpn)` → a peer handle (lookup,
//!   connect, cache) or "unknown yet"; `send_request(peer, header, payload)` where the
//!   payload is the requester's SGEs in its own memory, after `mem`'s lkey and bounds
//!   checks, gathered by [`Worker::am_send_raw`], and a token naming (QP, PSN) —
//!   the region must stay registered until that send's [`Event::Sent`], so
//!   `ibv_dereg_mr` waits for UCX as it waits today for another process's copies (and
//!   likewise for a responder's fetch into an MR); `send_response` likewise;
//!   `progress()`; the worker's event fd for the progress thread's sleep;
//! - upward (transport → engine): one call per arriving request, made inside
//!   [`Worker::progress`] with the message borrowed (header, and eager data or the
//!   rendezvous descriptor), so that the responder checks and then either copies,
//!   fetches into the checked destination, NAKs or parks the request in the QP's window
//!   — the engine's responder must therefore be callable from the transport's progress
//!   without holding a lock the transport's caller holds; one call per ACK/NAK/response
//!   (QP, PSN, status, data) and per endpoint failure (which QPs used it);
//! - the QP's remote address (GID, QPN) and its timer state at the requester; the
//!   responder's per-QP window and atomic results;
//! - handlers are `'static + Send` closures kept by the worker (UCP may call them from
//!   any progress call), so they reach the engine through a handle they capture — an
//!   object like `shared::Endpoint` — not through a borrow;
//! - the worker is made, and progressed, outside every provider lock: in a process
//!   whose `libibverbs.so.1` is softverbs, making the UCP context has UCX's verbs
//!   component list the soft devices, which re-enters the provider (tried with the
//!   cdylib preloaded: it works, and the TCP-only setting leaves them unused); under
//!   `softverbs run`, which presents `/dev/infiniband`, UCX would also open them to
//!   query them (not tried).
//!
//! Built: downward, the engine's UCX route asks `Transport::machine_reach` (an
//! endpoint, "pending" while a lookup runs, or unreachable) and sends with
//! `Transport::machine_send` (an owned copy of the payload, so no region waits on
//! UCX); upward, the handlers queue each message (header and payload copied) and the
//! machine thread, started by the transport with the provider's `shared::Endpoint`,
//! calls `Endpoint::machine_turn`, which runs `engine::route::serve_machine`: the
//! transport's turn (progress, connections, lookups) returns the queued messages, and
//! the route runs them under QP locks with the worker's lock released, then sends the
//! answers. An endpoint's failure only makes the transport forget it; the route's
//! timer re-sends. The worker is made and progressed outside every provider lock.
//! The library itself is loaded earlier, when a bound device is opened, on the
//! program's thread: UCX's memory hooks patch `mmap`, `sbrk` and `brk` and move the
//! program break as the library loads, which is safe only while no other thread runs
//! (`Transport::load_ucx` says what happened when the machine thread loaded it).
//!
//! Bulk bandwidth over UCX's TCP transport needs segments larger than its 8 KiB
//! default (`benches/ucx.rs`: 1 MiB messages at 0.3× a TCP stream's rate by default,
//! 0.6–1.1× with 512 KiB segments); these are transport settings, which
//! `ucp_config_modify` reaches in UCX 1.13 by their names without the transport's
//! prefix (`RX_SEG_SIZE`: UCP hands a name it does not know to each transport's
//! table; `TCP_RX_SEG_SIZE` is taken and never used), or the environment
//! (`UCX_TCP_RX_SEG_SIZE`). The route sets a receive segment of 260 KiB
//! ([`ROUTE_SETTINGS`] says why).
//!
//! UCX itself must not carry softverbs' traffic over verbs: inside a softverbs process
//! `libibverbs.so.1` is softverbs, so the worker is made with UCX's verbs transports
//! excluded ([`DEFAULT_SETTINGS`]).

#[allow(unsafe_code)]
mod am;
#[allow(unsafe_code)]
mod endpoint;
mod error;
#[allow(unsafe_code)]
pub mod lookup;
#[allow(unsafe_code)]
mod sockaddr;
#[allow(unsafe_code)]
pub mod sys;
pub mod wire;
#[allow(unsafe_code)]
mod worker;

use std::cell::{Cell, RefCell};
use std::fmt;
use std::net::SocketAddr;

use worker::State;

pub use am::{AmMessage, Data, Deferred, Rndv};
pub use error::{Error, Status};
pub use sys::{Ucp, LIBRARY};
pub use worker::{Event, Worker};

/// Active message ids are below this (a fixed table of handlers).
pub const MAX_AM_ID: u16 = 64;

/// The longest header [`Worker::am_send`] takes, in bytes.
pub const MAX_HEADER: usize = 1024;

/// The UCP settings softverbs makes its workers with: no transport through
/// `libibverbs` (inside a softverbs process that is softverbs itself) or librdmacm; TCP
/// for the connection set-up.
pub const DEFAULT_SETTINGS: &[(&str, &str)] = &[("TLS", "tcp"), ("SOCKADDR_TLS_PRIORITY", "tcp")];

/// The UCP settings of the workers that carry verbs between machines, and of anything
/// that talks to them: [`DEFAULT_SETTINGS`]; every message eager, so that a handler
/// has the whole payload (UCP puts a longer one together) and nothing is fetched later;
/// and UCX's TCP receive segment at 260 KiB (`RX_SEG_SIZE`, named without the
/// transport's `TCP_` prefix), which is also the largest piece UCX sends a message in.
/// One piece of a long WRITE ([`wire::FRAGMENT`], 256 KiB) with its headers fits it,
/// and reaches the handler where UCX received it: no copy by UCP, no allocation of the
/// message's size (`ib_write_bw -s 1M -t 4`, medians of five rounds alternating: 2.20
/// against 1.97 and 2.86 against 2.50 GB/s on two 16-core VMs, no change on the
/// 2-core one). With UCX's
/// 64 KiB a 1 MiB request went in sixteen `sendmsg` calls, and the requester's
/// thread, which makes them, was the busiest of the route, mostly in the kernel's send
/// path; at 256 KiB it is four, and `ib_write_bw -s 1M` moved 18% more at the median of
/// five rounds side by side (at 35775db). A segment of 1 MiB and 4 KiB, which sent
/// such a request in one piece, once made 128 outstanding 1 MiB WRITEs end in
/// `IBV_WC_RETRY_EXC_ERR` (7 runs of 40; not seen again, cause not found). Every
/// process of the route must use the same segment and pieces (a receiver's buffer
/// holds one segment): the lookup's version ([`lookup`]) changes with them, so that
/// processes of two versions find nobody rather than each other.
pub const ROUTE_SETTINGS: &[(&str, &str)] = &[
    ("TLS", "tcp"),
    ("SOCKADDR_TLS_PRIORITY", "tcp"),
    ("RNDV_THRESH", "inf"),
    ("RX_SEG_SIZE", "260k"),
];

// The ids and slots of the worker's tables, which the worker, its endpoints and its
// active messages all name.

/// An endpoint of a [`Worker`]: an index and a generation, so that a closed endpoint's
/// id never names a later one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EpId {
    index: u32,
    generation: u32,
}

/// A listener of a [`Worker`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ListenerId(u32);

/// A peer asking to connect through a listener: accept it ([`Worker::accept`]) or refuse
/// it ([`Worker::reject`]). One left unanswered holds UCP's resources for the
/// connection until the worker is destroyed.
#[derive(Debug)]
pub struct ConnRequest {
    raw: sys::ucp_conn_request_h,
    listener: ListenerId,
    /// The peer's address, when UCP says.
    pub peer: Option<SocketAddr>,
}

struct EpSlot {
    state: *const State,
    id: EpId,
    handle: Cell<sys::ucp_ep_h>,
    failed: Cell<Option<Status>>,
}

struct ListenerSlot {
    state: *const State,
    id: ListenerId,
    handle: Cell<sys::ucp_listener_h>,
}

/// A receive handler: called for each active message of its id.
type Handler = Box<dyn FnMut(AmMessage<'_>) + Send>;

struct HandlerSlot {
    state: *const State,
    handler: RefCell<Option<Handler>>,
}

/// UCP could not be loaded.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum LoadError {
    /// `dlopen` failed: the library is not installed (Debian's `libucx0`), or broken.
    Open {
        /// The name given to `dlopen`.
        library: String,
        /// `dlerror()`'s text.
        reason: String,
    },
    /// The library lacks a function softverbs needs (a UCP older than 1.13).
    Symbol {
        /// The library opened.
        library: String,
        /// The missing function.
        symbol: &'static str,
    },
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LoadError::Open { library, reason } => write!(
                f,
                "cannot load UCX's {library} (Debian package libucx0): {reason}"
            ),
            LoadError::Symbol { library, symbol } => {
                write!(f, "{library} has no {symbol}: UCX 1.13 or later is needed")
            }
        }
    }
}

impl std::error::Error for LoadError {}
