//! vqp-softverbs: a userspace RDMA provider with the libibverbs C ABI.
//!
//! It lets vqp's host crate, its examples and tests — and other programs written
//! against libibverbs — run on machines with no RDMA NIC and no kernel RDMA modules.
//!
//! # Layers
//! Each layer imports only from its own and the layers under it, and no modules import
//! each other in a circle (a folder's files, a parent and its children, count as one);
//! `tests/layers.rs` checks both by reading the imports. The provider — the process's
//! devices, object tables, engine and fault rules — is looked up once, at the top
//! (`provider::get()`, in the ABI layer only), and handed down as an argument or kept
//! by what it was handed to.
//!
//! ```text
//!  application ──ibv_* symbols / VerbsTable──┐  ──context->ops (inline verbs)──┐
//!                                            ▼                                 ▼
//!  1 ABI          abi/, the API functions of this file, symbols, launch (`softverbs run`)
//!  2 provider     provider/: the devices, the MR, QP and SRQ tables, the engine, fault
//!                 rules; it implements what the engine and the namespace ask of it;
//!                 xrc_open (verbs on an XRC receive QP that another process opened)
//!  3 objects      qp/ (the QP object: state machine, posting, its granted sizes)
//!  4 engine       engine/: the part of a QP the engine runs (qp: queues, state,
//!                 completions, error and flush), run queue, reorder policy, executing
//!                 WQEs, the responder, route/ (where a WQE that leaves its
//!                 requester goes: the route interface, the in-process route, the
//!                 namespace route to or from another process, the UCX route to or
//!                 from another machine); `Tables`, what it
//!                 asks of the provider
//!  5 queues       cq (completion queues, asynchronous events), srq (shared receive
//!                 queues), xrc (XRC domains), mem (keys, checked copies), wqe (work
//!                 requests as queued, the queue limits)
//!  6 transports   transport (the engine's way to other processes and machines, its
//!                 machine thread), shared/ (namespace,
//!                 registry, inbox, exports, process-to-process copies), device (a port:
//!                 addresses, link state, interface), link (rated ports), ucx (UCP
//!                 loaded at run time, for other machines)
//!  7 base         config (environment), os (eventfd, atexit, lock, interface queries),
//!                 netdev (a RoCE port's interface: GIDs, MTU, state), locate, region
//!                 (what a registered region is)
//!  ──────────────────────────────────────────────────────────────────────────────────
//!                 vqp-sys: the C ABI's structs, constants, VerbsTable
//! ```
//! How the layers meet:
//! - a QP object (`qp::Qp`) contains and owns the part the engine runs
//!   (`engine::QpCore`); posting checks and queues on the object, then hands the core
//!   to the engine's run queue;
//! - the engine asks the provider for its devices, memory keys and the QPs and SRQs
//!   named by number through a trait it defines (`engine::Tables`), over which it is
//!   generic (no dynamic dispatch on the per-WQE path); the records of the inbox
//!   that run object verbs rather than move data (calls on an XRC receive QP that
//!   another process opened) go back up through it too (`Tables::on_object_record`);
//! - every WQE that leaves its requester goes through one route interface
//!   (`engine::route`, its contract in `transport`'s docs): in this process the
//!   requester's thread runs the responder itself; for another process the namespace
//!   route carries it. The engine owns its `transport::Transport`, made with it, and
//!   everything for another process (requests, the inbox while polling, the keys and
//!   QP states published for one-sided requesters) goes through the namespace the
//!   transport joined;
//! - the shared namespace reaches what is above it only through the interface it is
//!   handed when the process joins (`shared::Endpoint`, which the provider
//!   implements): the records of its inbox go there, to the engine's namespace route (`engine::route`). It
//!   keeps the namespace in a process-wide cell for one reader only, its exit handler
//!   (an `atexit` function is handed nothing).
//!
//! The CQ, SRQ and key table sit under the engine because the engine writes
//! completions into CQs, takes receives from SRQs and checks keys; their verbs
//! (`ibv_poll_cq`, `ibv_post_srq_recv`, `ibv_reg_mr`, …) are the ABI's calls on them.
//!
//! The ABI types come from vqp-sys, the crate under both this provider and vqp's binding
//! (vqp-host); the provider does not depend on the binding.
//!
//! # Devices
//! `soft0`, `soft1`, … ([`DEFAULT_DEVICES`] of them, or `VQP_SOFT_DEVICES`, or
//! [`set_device_count`] before first use). Each has one port, ACTIVE, link layer
//! **InfiniBand**: LID `index + 1`, one GID (`fe80::` + node GUID, index 0), one P_Key
//! (0xffff at index 0), MTU 4096. An address vector may name the peer by LID or, with a
//! GRH, by GID. QP types: RC, UC and UD (with address handles), XRC (send and receive
//! QPs, XRC domains and SRQs), and shared receive queues. Limits are in [`ibv_query_device`]: 16384 WQEs per queue, 32 SGEs, 1 KiB
//! inline, 4 Mi CQEs, 16 outstanding READ/atomic. A port's link can be rated (bytes per
//! second, [`set_rate`]) or taken down ([`set_link`]). `ibv_query_port` reports a rated
//! port's rate as the InfiniBand width and lane speed nearest to it (1 GB/s: 4X SDR,
//! 10 Gb/s), an unlimited one as 4X EDR, 100 Gb/s. A device bound to a network
//! interface has a RoCE port instead (see [RoCE](#roce)).
//!
//! # RoCE
//! A device bound to a network interface (`VQP_SOFT_NETDEV=soft0=eth1,soft1=eth2`, or
//! `softverbs run --netdev soft0=eth1`) has a RoCE port, as `rdma link add … type rxe
//! netdev eth1` makes one:
//! - link layer Ethernet (`IBV_LINK_LAYER_ETHERNET`), LID 0, capabilities CM and
//!   IP-based GIDs, as mlx5 reports a RoCE port (the kernel's `mlx5_query_port_roce`);
//! - its GID table is the kernel's for a RoCE v2-only device (`roce_gid_mgmt`, as for
//!   `rdma_rxe`): index 0 the default GID (`fe80::` + the EUI-64 of the interface's
//!   MAC), then each IPv4 address as `::ffff:a.b.c.d`, then each other IPv6 address;
//!   every entry `IBV_GID_TYPE_ROCE_V2` for `ibv_query_gid_ex`/`ibv_query_gid_table`
//!   (with the interface's index) and `ibv_query_gid_type`. We hold no RoCE v1 entries,
//!   which a ConnectX interleaves, so the first IPv4 GID is index 1 on every bound
//!   device. The table is read when the provider starts;
//! - its active MTU is the largest IB MTU that fits the interface's MTU after the RoCE
//!   headers (the kernel's `iboe_get_mtu`: 1500 → 1024, 9000 → 4096); a UD send longer
//!   than it completes with `IBV_WC_LOC_LEN_ERR`;
//! - its state follows the interface's (`IFF_UP` and `IFF_RUNNING`): the shared
//!   namespace's service thread (started when a context is opened on a bound device)
//!   looks at the interface with two ioctls every 100 ms, updates the MTU, and raises
//!   `IBV_EVENT_PORT_ERR` when it went down, `IBV_EVENT_PORT_ACTIVE` when it came back.
//!   While down, WQEs through the port fail as on a link taken down by [`set_link`];
//! - an address without a GRH is refused, as on a ConnectX RoCE port: `ibv_modify_qp`
//!   with `IBV_QP_AV` returns `EINVAL` (the kernel's `mlx5_set_path`), `ibv_create_ah`
//!   returns null with `errno` `EINVAL` (rdma-core's `mlx5_create_ah`); so is a source
//!   GID index past the table;
//! - a GRH's `dgid` resolves to the device holding that GID: one of ours, or a bound
//!   device of another process of the shared namespace (each process publishes its RoCE
//!   GIDs in its exports when it joins; a lookup is cached for a second). Two
//!   processes in two network namespaces that name the same `VQP_SOFT_DIR` therefore
//!   reach each other by GID; their data still moves through shared memory;
//! - a datagram through an address handle with a GRH arrives with a GRH naming the
//!   sender's GID at the handle's source index and the receiving port's GID of the same
//!   kind (IPv4-mapped or not), in the IPv6 layout on every port;
//! - sysfs (`ibv_read_sysfs_file` and `softverbs run`'s tree): `link_layer`
//!   `Ethernet`, `lid` `0x0`, `gids/N`, `gid_attrs/types/N` `RoCE v2`,
//!   `gid_attrs/ndevs/N` the interface.
//!
//! An interface that does not exist or has no address is reported on stderr when the
//! provider starts, and `ibv_open_device` on that device fails with `ENODEV`. An unbound
//! device is the InfiniBand port described above.
//!
//! # Running a libibverbs program on it
//! The cdylib is `target/<profile>/libvqp_softverbs.so` (`cargo build -p vqp-softverbs`).
//! It is a complete `libibverbs.so.1`: SONAME `libibverbs.so.1`, rdma-core's symbol
//! versions, and every function of rdma-core's `libibverbs.map` exported (see
//! [`symbols`] and below), so a program built against rdma-core runs on it unchanged:
//! - in place of the library, `mkdir lib && ln -s $PWD/target/release/libvqp_softverbs.so
//!   lib/libibverbs.so.1`, then `LD_LIBRARY_PATH=$PWD/lib ./your-program` (or install it
//!   as `libibverbs.so.1`); `ibv_devinfo -v` lists `soft0`, `soft1`;
//! - preloaded: `LD_PRELOAD=$PWD/target/release/libvqp_softverbs.so ./your-program`. The
//!   system's libibverbs is still loaded, but a library whose SONAME is
//!   `libibverbs.so.1` answers every versioned reference to `libibverbs.so.1`, so nothing
//!   falls through to it;
//! - vqp's host (and anything using `vqp_host::Verbs::load`):
//!   `VQP_IBVERBS_PATH=$PWD/target/release/libvqp_softverbs.so ./your-program`;
//! - in-process, without `dlopen`: `vqp_host::Verbs::from_table(verbs_table())`;
//! - with the devices presented as a kernel provider presents them
//!   (`/dev/infiniband/uverbs*`, `/sys/class/infiniband`), which UCX and Open MPI look
//!   for: `softverbs run -- ./your-program`, the crate's binary ([`launch`]).
//!
//! What the exports do: the verbs softverbs has (devices, ports, GIDs with their type,
//! P_Keys, PD, MR with `rereg` and the `ibv_alloc_buf` buffers, CQ with resize and
//! channels, RC QPs, UC QPs (SEND and WRITE, unacknowledged: what the responder cannot
//! take is dropped and the requester completes), UD QPs with address handles (datagrams
//! up to the MTU behind the GRH area, Q_Keys), shared receive queues with the limit
//! and last-WQE events, XRC (`ibv_open_xrcd` domains shared between processes through
//! a file, XRC SRQs, XRC send and receive QPs, `ibv_open_qp`; softverbs/README.md),
//! asynchronous events, the string and rate helpers, the sysfs attributes of the soft
//! devices) behave as on a ConnectX; the others fail as an
//! rdma-core provider without the operation does — null with `errno` `EOPNOTSUPP`, or
//! `EOPNOTSUPP` returned: multicast, imports, ECE, DMA handles, dma-buf
//! registration, memory windows, on-demand paging. The data-path verbs are verbs.h
//! inlines over `context->ops`, which this provider fills. Every context is an extended
//! `verbs_context` (laid out in front of the `ibv_context`, `abi_compat`
//! `__VERBS_ABI_IS_EXTENDED`), so verbs.h's extended verbs reach the provider:
//! `ibv_query_device_ex`, the sized `ibv_query_port`, `ibv_query_rt_values_ex`,
//! `ibv_create_cq_ex` with `ibv_start_poll` and the `ibv_wc_read_*` family (completion
//! timestamps included: `CLOCK_MONOTONIC_RAW` and `CLOCK_REALTIME` nanoseconds, taken
//! as the completion enters the CQ), `ibv_create_qp_ex` with the `ibv_wr_*` posting API
//! (`ibv_qp_to_qp_ex`; a batch posts all or nothing through `ibv_post_send`'s path),
//! thread and parent domains, and device memory (`ibv_alloc_dm`, the word-aligned
//! copies, zero-based `ibv_reg_dm_mr`). softverbs/README.md has the details and what
//! rdma-core's pyverbs suite makes of it. `IBVERBS_1.0` entries (programs
//! built against libibverbs 1.0, with other structs) and rdma-core's provider-private
//! functions (`ibv_cmd_*`, `verbs_*`; listed so that the direct-verbs libraries perftest
//! links, libmlx5 and libefa, load) fail cleanly; `ibv_query_gid_type` and
//! `ibv_wr_opcode_str`, the private functions rdma-core's tools call, work.
//!
//! How the versions are made (rustc links a cdylib with its own anonymous version script,
//! which GNU ld cannot combine with named nodes): `build.rs` links the cdylib with the
//! toolchain's `rust-lld`, passes `libibverbs.map` as a second version script, and adds
//! an object it generates from the map with the build's own `rustc`; its module
//! documentation has the details. Without `rust-lld` in the toolchain (or on a target
//! other than x86_64 and aarch64) the library gets its SONAME but no versions, and the
//! build prints a warning. Only the cdylib's link is affected, never a program that links
//! this crate as an rlib.
//!
//! One consequence of the SONAME: in a process that has `dlopen`ed the cdylib by path, a
//! later `dlopen("libibverbs.so.1")` returns the cdylib (the dynamic loader matches
//! SONAMEs); load the system's library first, or by its full path, to have both.
//!
//! # Environment
//! | variable | values | default |
//! |---|---|---|
//! | `VQP_SOFT_DEVICES` | number of devices (≤ 64) | 2 |
//! | `VQP_SOFT_REORDER` | `fifo`, `random:SEED`, `adversarial` ([`Reorder`]) | `fifo` |
//! | `VQP_SOFT_PROGRESS` | `thread`, `inline` ([`Progress`]) | `thread` |
//! | `VQP_SOFT_FAIL_QP` | `SEL:N,…`: the QP goes to error at its (N+1)-th WQE | none |
//! | `VQP_SOFT_DELAY` | `SEL:MICROS,…`: each WQE waits that long after posting | none |
//! | `VQP_SOFT_LINK_DOWN` | device indices whose link starts down, `0,1` | none |
//! | `VQP_SOFT_NETDEV` | devices bound to network interfaces, `soft0=eth1,soft1=eth2`: RoCE ports ([RoCE](#roce)) | none |
//! | `VQP_SOFT_DIR` | the shared namespace directory ([`ENV_DIR`]): a directory of the effective user, not writable by group or others, not a symlink (created 0700 when missing) | `/dev/shm/vqp-softverbs-<uid>` |
//!
//! `SEL` is `qpn=NUM` (decimal or `0x` hex), `nth=K` (the K-th QP created, from 1) or
//! `all`. Values are read once, at the first verbs call; the API functions below change
//! them afterwards. A value that does not parse is reported on stderr and ignored.
//!
//! A program that `dlopen`s the cdylib holds a separate copy of the provider, which the
//! Rust functions below (linked into the program) do not reach: it resolves the C
//! functions `vqp_soft_set_reorder`, `vqp_soft_fail_qp_after`, `vqp_soft_delay_qp`,
//! `vqp_soft_clear_faults` and `vqp_soft_set_link` from the loaded library instead
//! (see [`vqp_soft_set_reorder`] and its neighbours).
//!
//! # Across processes
//! Devices and QP numbers are shared by every process that names the same namespace
//! directory (`VQP_SOFT_DIR`): a QP may connect (or, UD, send) to a QP of another
//! process, and every operation runs between the two processes' private memories (the
//! `shared` module: a registry of QP numbers, a shared-memory inbox per process, each
//! process's exported QP states and memory keys for the one-sided operations a
//! requester executes itself, and `process_vm_readv`/`writev` for the data).
//! [`qp_owner_pid`] says which process owns a QP number.
//!
//! The namespace steers where data goes, so it is trusted only when nobody else can
//! write it: the directory and every file in it (`registry-2`, one `proc-<pid>-<token>`
//! per process) are opened without following symlinks and refused unless the effective
//! user owns them and group and others cannot write them. A namespace that cannot be
//! used — refused (the message names the path and what is wrong: "… is a symlink",
//! "… is writable by group/others (mode 0777)", "… is owned by uid 65534, not 0"),
//! damaged, or of another version — is reported once on stderr, and every
//! `ibv_create_qp` then fails: `errno` `EACCES` for a refused path, `EPROTO` for a
//! damaged registry, the system's error otherwise. The machine-wide table holds 2^18 QP
//! numbers; when live processes hold them all, `ibv_create_qp` fails with `ENOMEM`, as
//! a ConnectX out of QPs does; a number is never handed out twice. What a dead process
//! left (its file, its QP numbers) is reclaimed when a process joins, every second by
//! each live process's service thread, and when the table is full, each time a bounded
//! amount of work. Processes of a namespace may have different device counts
//! (`VQP_SOFT_DEVICES`): each has all of its own, and two processes reach each other on
//! every device both have.
//!
//! # Execution model
//! Posting only queues WQEs; a progress engine executes them (see the `engine` module):
//! inline in every `poll_cq` (a bounded batch per call, on the polling thread) and, in
//! the default [`Progress::Thread`] mode, on a background thread when work is pending
//! and nobody polls (so blocking on a completion channel works); that thread is stopped
//! and joined at process exit (or when the cdylib is unloaded), so that the provider
//! leaves nothing for a leak checker (`.ci/valgrind.sh`). One thread executes at a
//! time. Order within a QP is posting order; across QPs the [`Reorder`] policy
//! decides, and never starves a QP beyond [`ADVERSARIAL_BOUND`] picks.
//!
//! # Errors as hardware reports them
//! - bad lkey, PD or bounds of a local SGE → `IBV_WC_LOC_PROT_ERR`;
//! - bad rkey (unknown, of another PD or device, an invalidated or unbound window, a
//!   type 2 window through another QP), bounds, access (MR, window or responder QP
//!   flags), or an unmapped range of an on-demand region → `IBV_WC_REM_ACCESS_ERR` at
//!   the requester; a misaligned atomic →
//!   `IBV_WC_REM_INV_REQ_ERR`. As on ConnectX, the responder detected the error, so
//!   its QP goes to error too (its receives are flushed) and raises
//!   `IBV_EVENT_QP_ACCESS_ERR` (`IBV_EVENT_QP_REQ_ERR` for the invalid request);
//! - SEND into a receive too small → `IBV_WC_LOC_LEN_ERR` on the receive and
//!   `IBV_WC_REM_INV_REQ_ERR` at the sender; a receive with a bad lkey →
//!   `IBV_WC_LOC_PROT_ERR` / `IBV_WC_REM_OP_ERR`; both QPs go to error (the
//!   responder raising `IBV_EVENT_QP_REQ_ERR`);
//! - no receive posted for a SEND or WRITE_WITH_IMM → RNR NAK: the QP's send queue
//!   stalls for the responder's `min_rnr_timer` and retries, `rnr_retry` times (7 =
//!   forever), then `IBV_WC_RNR_RETRY_EXC_ERR`;
//! - a request nobody takes (the peer QP does not exist or is not connected back) is
//!   lost, as on the wire: the requester retransmits it after its local ACK timeout
//!   (`4.096 µs · 2^timeout`), `retry_cnt` times, then completes it with
//!   `IBV_WC_RETRY_EXC_ERR`; a peer that becomes ready meanwhile takes the
//!   retransmission. A link down, or an address that names no device, is
//!   `IBV_WC_RETRY_EXC_ERR` at once;
//! - a completion error moves the QP to ERR; then every outstanding WQE, sends and
//!   receives, completes with `IBV_WC_WR_FLUSH_ERR`, as do WQEs posted later;
//! - a full CQ: the CQ enters error (`IBV_EVENT_CQ_ERR`), the producing QP goes to ERR,
//!   and `poll_cq` returns -1 once the queued entries are polled.
//!
//! A send-queue slot of an unsignaled WQE is released when a later signaled WQE of the
//! QP completes, as on hardware: a QP posting only unsignaled WQEs fills up (`ENOMEM`).
//!
//! A control verb given an object that does not exist — destroyed already (a second
//! `ibv_destroy_qp`, `ibv_destroy_cq`, `ibv_dereg_mr`, …), never handed out here, or of
//! another kind — returns `EINVAL` (or null with `errno` `EINVAL`) without touching
//! memory: live objects are kept in a registry. An address freed and reused by a new
//! object of the same kind is that new object, a limit of the C ABI.
//!
//! # Cost
//! `cargo bench -p vqp-softverbs --bench provider` (inline progress, one core, on a
//! 2-core VM): 64-byte RDMA WRITEs at about 7.4 M WQEs/s in chains of 32 with the last
//! signaled (6.5 M/s all signaled; 4.8 M/s posting and polling one at a time); 1 MiB
//! WRITEs at about 39 GiB/s, the same as a plain `memcpy` of 1 MiB in the same run.
//!
//! Across processes, `cargo bench -p vqp-softverbs --bench xproc` (the peer is a second
//! process; 2-core VM, medians): 1 MiB RDMA WRITEs at 16.4 GiB/s beside a one-core
//! `memcpy` at 31.1 GiB/s (53%: `process_vm_readv` moves the bytes); 64-byte WRITEs at
//! about 2.8–3.4 M WQEs/s (they travel inside the request record, answers coalesced);
//! an 8-byte SEND ping-pong at 0.99 µs per half round trip (no futex wake while the
//! receiving process polls).
//!
//! # Safety fence
//! `unsafe` code lives in five modules only: `abi` (the `extern "C"` surface: pointer
//! casts, C structs), `os` (eventfds, `atexit`, the interface queries of RoCE ports), `mem` (copies between registered memory),
//! `shared::sys` (shared mappings, `flock`, futexes, `process_vm_*`) and `launch::mount`
//! (`unshare` and `mount` for `softverbs run`).
#![deny(unsafe_code, missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(clippy::undocumented_unsafe_blocks)]

#[allow(unsafe_code)]
mod abi;
mod config;
mod cq;
mod device;
mod engine;
pub mod launch;
mod link;
mod locate;
#[allow(unsafe_code)]
mod mem;
mod netdev;
#[allow(unsafe_code)]
mod os;
mod provider;
mod qp;
mod region;
mod shared;
mod srq;
pub mod symbols;
mod transport;
pub mod ucx;
mod wqe;
mod xrc;

use std::fmt;
use std::sync::atomic::Ordering;
use std::time::Duration;

pub use abi::*;
pub use config::{
    DelayRule, FailRule, Progress, QpSelector, Reorder, ADVERSARIAL_BOUND, DEFAULT_DEVICES,
    ENV_DELAY, ENV_DEVICES, ENV_FAIL_QP, ENV_LINK_DOWN, ENV_NETDEV, ENV_PROGRESS, ENV_RATE,
    ENV_REORDER, MAX_DEVICES,
};
pub use engine::{IDLE_GRACE, POLL_BUDGET};
pub use link::parse_rate;
pub use locate::{cdylib_candidates, cdylib_candidates_of, find_cdylib};
pub use shared::ENV_DIR;

/// The process id that owns QP `qpn` of device `device` in the shared namespace, if a
/// live process does (a dead owner's number is reclaimed on the way). For diagnostics
/// and tests: which process a peer QP number resolves to.
pub fn qp_owner_pid(device: usize, qpn: u32) -> Option<u32> {
    let p = provider::get();
    p.transport().qp_owner_pid(p, device, qpn)
}

/// Reserves QP numbers for this process until at most `leave_free` of the machine-wide
/// table are free, and returns how many it took (freed when the process exits). For
/// tests of a full table; `None` when the namespace cannot be used.
#[doc(hidden)]
pub fn hold_qp_numbers(leave_free: usize) -> Option<usize> {
    let p = provider::get();
    p.transport().hold_qp_numbers(p, leave_free)
}

/// A configuration call that could not be applied.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConfigError {
    /// The devices already exist: the count can only be set before the first verbs call.
    AlreadyInitialised,
    /// No device has this index.
    NoSuchDevice(usize),
    /// The value is out of range.
    OutOfRange,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::AlreadyInitialised => {
                f.write_str("the provider is already initialised; set the device count first")
            }
            ConfigError::NoSuchDevice(i) => write!(f, "no device soft{i}"),
            ConfigError::OutOfRange => f.write_str("value out of range"),
        }
    }
}

impl std::error::Error for ConfigError {}

/// Sets the number of devices. Only before the provider initialises (the first verbs
/// call or any other function of this crate except this one); overrides
/// `VQP_SOFT_DEVICES`.
///
/// # Errors
/// [`ConfigError::AlreadyInitialised`] afterwards; [`ConfigError::OutOfRange`] for 0 or
/// more than [`MAX_DEVICES`].
pub fn set_device_count(n: usize) -> Result<(), ConfigError> {
    if n == 0 || n > MAX_DEVICES {
        return Err(ConfigError::OutOfRange);
    }
    if provider::request_devices(n) {
        Ok(())
    } else {
        Err(ConfigError::AlreadyInitialised)
    }
}

/// Number of devices.
pub fn device_count() -> usize {
    provider::get().devices.len()
}

/// Sets the cross-QP reorder policy (overrides `VQP_SOFT_REORDER`). Takes effect for
/// the next pick; a `random` policy restarts from its seed.
pub fn set_reorder(policy: Reorder) {
    provider::get().engine.set_policy(policy);
}

/// The reorder policy in force.
pub fn reorder() -> Reorder {
    provider::get().engine.policy()
}

/// Sets the progress model (overrides `VQP_SOFT_PROGRESS`).
pub fn set_progress(progress: Progress) {
    provider::get().engine.set_progress(progress);
}

/// Runs the progress engine on the calling thread, up to `budget` WQEs (unless another
/// thread is running it); returns how many executed. `poll_cq` does this by itself.
pub fn progress(budget: usize) -> usize {
    let p = provider::get();
    p.engine.progress(p, budget)
}

/// WQEs queued for execution and not yet executed (an upper bound: WQEs flushed by an
/// error may still be counted until the engine passes over them).
pub fn pending() -> usize {
    provider::get().engine.pending()
}

/// Puts the selected QP(s) into the error state when they start their (n+1)-th WQE from
/// now: that WQE completes with `IBV_WC_RETRY_EXC_ERR`, the rest are flushed and
/// `IBV_EVENT_QP_FATAL` is raised. Applies to existing QPs (counting from their current
/// WQE) and to QPs created later (counting from their first).
pub fn fail_qp_after(qp: QpSelector, wqes: u64) {
    let p = provider::get();
    os::lock(&p.faults).fail.push(FailRule { qp, after: wqes });
    for q in p.selected_qps(qp) {
        let executed = q.lock().executed;
        q.fail_after
            .store(executed.saturating_add(wqes), Ordering::Relaxed);
    }
}

/// Puts the selected live QP(s) into the error state now, as a fatal error of the QP
/// does on hardware: everything outstanding is flushed (`IBV_WC_WR_FLUSH_ERR`) and
/// `IBV_EVENT_QP_FATAL` is raised on its context; a peer's requests to it then find no
/// one to answer. Returns how many QPs it failed.
pub fn fail_qp(qp: QpSelector) -> usize {
    let p = provider::get();
    let qps = p.selected_qps(qp);
    for q in &qps {
        let mut g = q.lock();
        q.to_error(&mut g, Some(cq::event::QP_FATAL));
    }
    qps.len()
}

/// Delays the selected QP(s): each WQE executes no earlier than `delay` after it was
/// posted. Applies to existing QPs (for later posts) and to QPs created later.
pub fn delay_qp(qp: QpSelector, delay: Duration) {
    let p = provider::get();
    os::lock(&p.faults).delay.push(DelayRule { qp, delay });
    let ns = delay.as_nanos().min(u128::from(u64::MAX)) as u64;
    for q in p.selected_qps(qp) {
        q.delay_ns.store(ns, Ordering::Relaxed);
    }
}

/// Removes every fault rule and clears the faults of existing QPs (a QP already in
/// error stays there). Links are not touched: see [`set_link`].
pub fn clear_faults() {
    let p = provider::get();
    let mut f = os::lock(&p.faults);
    f.fail.clear();
    f.delay.clear();
    drop(f);
    for q in p.all_qps() {
        q.fail_after.store(u64::MAX, Ordering::Relaxed);
        q.delay_ns.store(0, Ordering::Relaxed);
    }
}

/// Takes device `index`'s link down (`up == false`) or back up (on a RoCE port, the port
/// is active only while its interface is up too). While it is down the port reports
/// `IBV_PORT_DOWN`, and every WQE to or from the device completes with
/// `IBV_WC_RETRY_EXC_ERR` (its QP going to error). Raises `IBV_EVENT_PORT_ERR` /
/// `IBV_EVENT_PORT_ACTIVE` on the device's open contexts.
///
/// # Errors
/// [`ConfigError::NoSuchDevice`].
pub fn set_link(index: usize, up: bool) -> Result<(), ConfigError> {
    let p = provider::get();
    let dev = p
        .devices
        .get(index)
        .ok_or(ConfigError::NoSuchDevice(index))?;
    // The port's state is the link's and, on a RoCE port, its interface's: an event
    // only when that changes.
    let was = dev.is_up();
    dev.link_up.store(up, Ordering::Release);
    let now = dev.is_up();
    p.transport().export_links();
    if was != now {
        let kind = if now {
            cq::event::PORT_ACTIVE
        } else {
            dev.note_down();
            cq::event::PORT_ERR
        };
        p.raise_on_device(index, kind, 1);
    }
    Ok(())
}

/// Fails device `index` as a fatal hardware error does: its link goes down, every QP
/// on it moves to the error state (its work flushed, no per-QP event: mlx5 flushes
/// every QP on an internal error, `mlx5_ib_handle_internal_error`), and its open
/// contexts get `IBV_EVENT_DEVICE_FATAL`. The device stays down until
/// [`set_link`]`(index, true)`; its objects remain to be destroyed.
///
/// # Errors
/// [`ConfigError::NoSuchDevice`].
pub fn fail_device(index: usize) -> Result<(), ConfigError> {
    let p = provider::get();
    let dev = p
        .devices
        .get(index)
        .ok_or(ConfigError::NoSuchDevice(index))?;
    dev.link_up.store(false, Ordering::Release);
    p.transport().export_links();
    for q in p.all_qps().into_iter().filter(|q| q.dev == index) {
        let mut g = q.lock();
        q.to_error(&mut g, None);
    }
    p.raise_on_device(index, cq::event::DEVICE_FATAL, 0);
    Ok(())
}

/// Sets device `index`'s link rate in bytes per second (0: unlimited, the default): a
/// WQE leaving through it completes when its bytes would have crossed the link (see
/// [`ENV_RATE`]). Takes effect for WQEs that reach the link from now on, and for the
/// width and speed the next `ibv_query_port` reports.
///
/// # Errors
/// [`ConfigError::NoSuchDevice`].
pub fn set_rate(index: usize, bytes_per_sec: u64) -> Result<(), ConfigError> {
    provider::get()
        .devices
        .get(index)
        .ok_or(ConfigError::NoSuchDevice(index))?
        .link
        .set_rate(bytes_per_sec);
    Ok(())
}

/// Device `index`'s link rate in bytes per second (0: unlimited; `None` for no such
/// device).
pub fn rate(index: usize) -> Option<u64> {
    provider::get().devices.get(index).map(|d| d.link.rate())
}

/// Whether device `index`'s link is up (`None` for no such device).
pub fn link_up(index: usize) -> Option<bool> {
    provider::get().devices.get(index).map(|d| d.is_up())
}

/// The creation rank of QP `qp_num` (1 for the first QP of the process), for
/// [`QpSelector::Nth`]; `None` when no such QP lives.
pub fn qp_rank(qp_num: u32) -> Option<u64> {
    provider::get()
        .all_qps()
        .into_iter()
        .find(|q| q.qpn == qp_num)
        .map(|q| q.nth)
}
