//! `librdmacm.so.1` for softverbs: the RDMA connection manager (`rdma_cm`) between
//! processes of one machine, for unmodified programs built against rdma-core's
//! librdmacm (`rping`, `ucmatose`, `udaddy`, `rdma_server`/`rdma_client`, perftest's
//! `-R`), without the kernel's `rdma_ucm`.
//!
//! The cdylib has SONAME `librdmacm.so.1` and rdma-core's symbol versions
//! (`librdmacm.map`), and exports every function of `rdma_cma.h` and `rsocket.h`.
//! It calls libibverbs (`libibverbs.so.1`, loaded at run time: softverbs under
//! `softverbs run`) for devices, PDs, CQs and QPs.
//!
//! # Layers
//!
//! ```text
//! capi      the exported C functions: errno, no panic across the ABI
//! rsocket   stream sockets over an RC QP, connected through the CM
//! id        the C objects (channel, cm id, event) and the operations on them
//! qp        a cm id's QP: creation and the attributes of each state
//! agent     the process's socket, listeners, ids by number, the receive/timer thread
//! conn      one id's connection state, shared by id and agent
//! queue     an event channel's queue behind its pollable descriptor
//! wire      the CM messages (REQ, REP, RTU, REJ, DREQ, DREP, SIDR_REQ/REP)
//! addr dir verbs   addresses; the rendezvous directory; libibverbs and the devices
//! ```
//!
//! # Design
//!
//! - **Event channel**: an `eventfd` in semaphore mode, readable while events are
//!   queued; `poll`/`epoll`/`select` and `O_NONBLOCK` (`fcntl`) work on it as on the
//!   kernel's `rdma_cm` descriptor. An event stays the program's until
//!   `rdma_ack_cm_event`; `rdma_destroy_id` waits for every event of the id to be
//!   acknowledged, as rdma-core's does.
//! - **Carrier**: datagrams over `AF_UNIX` sockets in `<softverbs directory>/rdmacm/`
//!   ([`agent`] says why), one per process and one per bound port; messages of our own
//!   format modelled on IB CM's ([`wire`]).
//! - **Hostile peers**: any process of the user can send to the sockets; communication
//!   ids are random, the agent thread never waits on a peer, a replayed REQ of an
//!   ended connection is refused as stale ([`agent`] says how).
//! - **Addressing**: an address of an interface a soft device is bound to resolves to
//!   that device by the address's RoCE GID; loopback and other addresses of this
//!   machine to soft device 0, port 1 ([`addr`], [`verbs::place`]); the route is the
//!   path record between the two ports (GIDs, LIDs, MTU, P_Key 0xffff).
//! - **Connection**: REQ → REP → RTU for RC (private data up to 56 bytes on connect,
//!   196 on accept, 148 on reject), SIDR_REQ → SIDR_REP for UD (`RDMA_PS_UDP`, Q_Key
//!   `RDMA_UDP_QKEY`, the address vector in the event), DREQ → DREP. QPs made by
//!   `rdma_create_qp` are moved INIT → RTR → RTS with the agreed attributes (PSNs drawn
//!   at random, READ/atomic depths the smaller of both sides', retry and RNR counts as
//!   IB CM exchanges them); `rdma_init_qp_attr` gives the same attributes to programs
//!   that make their own QPs.
//! - **XRC**: ids of `IBV_QPT_XRC_SEND` and `IBV_QPT_XRC_RECV` (from `rdma_create_ep`'s
//!   `ai_qp_type`); an XRC receive QP and its XRC SRQ live in the device's XRC domain
//!   ([`verbs::xrcd`]), the SRQ with a CQ of its own ([`id::create_srq`]).
//!
//! # Not done
//!
//! Multicast, ECE, `rdma_resolve_addrinfo`/`rdma_query_addrinfo`,
//! `RDMA_OPTION_IB_PATH`, and of rsockets `rselect` and
//! `repoll_*` fail with `ENOSYS` (stream rsockets and `riomap`/`riowrite` work:
//! [`rsocket`]); `rdma_create_qp_ex` with anything beyond a PD and an XRC domain
//! fails with `EOPNOTSUPP`. Only processes
//! of one machine (one rendezvous directory) connect. An established connection whose
//! peer process exits without disconnecting gets no event. An id that only resolves a
//! source address does not reserve its port.
#![deny(unsafe_op_in_unsafe_fn, missing_docs)]
#![warn(clippy::undocumented_unsafe_blocks)]

pub mod abi;
pub mod addr;
pub mod agent;
#[allow(missing_docs)]
pub mod capi;
pub mod conn;
pub mod dir;
pub mod id;
pub mod qp;
pub mod queue;
pub mod rsocket;
pub mod verbs;
pub mod wire;
