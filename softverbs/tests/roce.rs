//! RoCE ports: soft devices bound to network interfaces (`VQP_SOFT_NETDEV`) in a
//! network namespace made for the test — link layer Ethernet, the interfaces' addresses
//! as RoCE v2 GIDs in the verbs and in sysfs, the MTU and the state of the interface, a
//! GRH required, QPs connected by GID and datagrams sent by GID (their GRH naming both
//! ports' GIDs), in one process and across two processes in two namespaces; the GID
//! index vqp-host chooses on a bound port (its IPv4 RoCE v2 GID); hostile peers at the
//! lookup port; `scripts/hosts.sh`. An interface that does not exist is a clear error at
//! `ibv_open_device`, and an unbound device stays an InfiniBand port. Through
//! `softverbs run --netdev`: the sysfs tree, and `rping` over RDMA-CM (vqp-rdmacm).
//!
//! The checks run in a child process (this test binary, one `#[ignore]`d test, started
//! with `ip netns exec` and `VQP_ROCE_CHILD` set), so that the provider reads the
//! namespace's interfaces. Needs root and iproute2 (see `netns`); the namespaces are
//! deleted even when a test fails.

mod common;
mod netns;
#[path = "procs/mod.rs"]
mod procs;

use std::ffi::CStr;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use common::*;
use netns::Netns;
use vqp_host::connect::{self, Address, Path};
use vqp_host::sys::*;
use vqp_host::{AsyncEventKind, EventSubject};

/// Set in the child: the checks it runs.
const CHILD: &str = "VQP_ROCE_CHILD";

/// `::ffff:a.b.c.d`.
fn v4(a: [u8; 4]) -> [u8; 16] {
    let mut g = [0u8; 16];
    g[10] = 0xff;
    g[11] = 0xff;
    g[12..].copy_from_slice(&a);
    g
}

/// Runs the `#[ignore]`d child test `name` in namespace `i` of `ns` with `env`; its
/// output must say it passed.
fn run_child(ns: &Netns, i: usize, name: &str, env: &[(&str, &str)]) {
    let exe = std::env::current_exe().unwrap();
    let mut c = ns.exec(i, &exe);
    c.args([
        name,
        "--exact",
        "--ignored",
        "--nocapture",
        "--test-threads=1",
    ])
    .env(CHILD, name);
    for (k, v) in env {
        c.env(k, v);
    }
    check_child(c, name);
}

fn check_child(mut c: Command, name: &str) {
    let run = start_cmd(&mut c);
    let out = procs::wait(
        &mut procs::Killed(Some(run)),
        std::time::Instant::now() + Duration::from_secs(60),
        name,
    );
    let (o, e) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(
        out.status.success() && o.contains("1 passed"),
        "child {name}: {}\n--- stdout\n{o}\n--- stderr\n{e}",
        out.status
    );
}

/// Starts `c` with its output captured.
fn start_cmd(c: &mut Command) -> std::process::Child {
    use std::process::Stdio;
    c.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("starting {c:?}: {e}"))
}

/// An address handle on `s`'s PD to `dgid` from local GID index 1 (the IPv4 one).
fn ah_to(s: &Side, dgid: [u8; 16]) -> *mut ibv_ah {
    ah_from(s, dgid, 1)
}

/// An address handle on `s`'s PD to `dgid` from local GID index `sgid_index`.
fn ah_from(s: &Side, dgid: [u8; 16], sgid_index: u8) -> *mut ibv_ah {
    let mut attr = ibv_ah_attr {
        port_num: 1,
        is_global: 1,
        ..Default::default()
    };
    attr.grh.dgid.raw = dgid;
    attr.grh.sgid_index = sgid_index;
    attr.grh.hop_limit = 64;
    // SAFETY: a live PD and a readable attribute.
    let ah = unsafe { vqp_softverbs::ibv_create_ah(s.pd.as_raw(), &mut attr) };
    assert!(!ah.is_null(), "ibv_create_ah by GID");
    ah
}

/// The (source, destination) GIDs of the GRH at the head of `s`'s buffer.
fn grh_gids(s: &Side) -> ([u8; 16], [u8; 16]) {
    let b = bytes(s);
    (b[8..24].try_into().unwrap(), b[24..40].try_into().unwrap())
}

/// Checks that the next asynchronous event of `s`'s context, within 3 s, is `kind` on
/// port 1.
fn port_event(s: &Side, kind: AsyncEventKind) {
    let ev = s
        .ctx
        .next_async_event(Some(Duration::from_secs(3)))
        .unwrap();
    assert_eq!(
        ev.map(|e| (e.kind, e.subject)),
        Some((kind, EventSubject::Port(1)))
    );
}

/// Whether this process is the child meant to run `name`.
fn is_child(name: &str) -> bool {
    std::env::var(CHILD).is_ok_and(|v| v == name)
}

/// A test's network: `count` namespaces named after `tag`, joined by a veth pair (MTU
/// 1500) whose end `vr0` (192.0.2.1/24) is in the first and `vr1` (`addr1`) in the
/// last, and a softverbs namespace directory for it. All are removed when dropped (the
/// directory first).
struct Lab {
    _dir: netns::TempDir,
    ns: Netns,
    /// The softverbs namespace directory.
    dir: PathBuf,
}

impl Lab {
    fn new(tag: &str, count: usize, addr1: &str) -> Lab {
        let ns = Netns::new(tag, count);
        ns.veth((0, "vr0", "192.0.2.1/24"), (count - 1, "vr1", addr1), 1500);
        let dir = netns::TempDir(procs::namespace(tag));
        Lab {
            dir: dir.0.clone(),
            _dir: dir,
            ns,
        }
    }

    /// `softverbs run OPTIONS --dir DIR --` in the first namespace, with none of this
    /// process's `VQP_SOFT_*` settings: the program and its arguments follow.
    fn launcher(&self, options: &[&str]) -> Command {
        let mut c = self
            .ns
            .exec(0, std::path::Path::new(env!("CARGO_BIN_EXE_softverbs")));
        c.arg("run")
            .args(options)
            .arg("--dir")
            .arg(&self.dir)
            .arg("--");
        for (k, _) in std::env::vars_os() {
            if k.to_string_lossy().starts_with("VQP_SOFT_") {
                c.env_remove(k);
            }
        }
        c
    }
}

/// The RDMA-CM library (vqp-rdmacm's cdylib).
fn rdmacm_lib() -> PathBuf {
    vqp_softverbs::cdylib_candidates_of("vqp_rdmacm")
        .into_iter()
        .find(|p| p.is_file())
        .expect("libvqp_rdmacm.so is built for vqp-softverbs' tests (a dev-dependency)")
}

/// A program's stdout and stderr, one after the other.
fn text(o: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// A server and its client: `server` runs until `listening` (given its pid) says it
/// listens, within 60 s and without exiting; then `client` runs; both must exit with
/// success in that time (the server 5 s more), or end in rping's own exit race
/// (`procs::rping_exit_race`). Their outputs, and both as one text for messages.
fn server_and_client(
    mut server: Command,
    listening: impl Fn(u32) -> bool,
    mut client: Command,
) -> (std::process::Output, std::process::Output, String) {
    let mut srv = procs::Killed(Some(start_cmd(&mut server)));
    let pid = srv.0.as_ref().unwrap().id();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !listening(pid) {
        let exited = srv.0.as_mut().unwrap().try_wait().ok().flatten().is_some();
        assert!(
            !exited && std::time::Instant::now() < deadline,
            "the server never listened: {:?}",
            srv.0.take().map(|mut c| {
                let _ = c.kill();
                c.wait_with_output()
            })
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut cli = procs::Killed(Some(start_cmd(&mut client)));
    let c = procs::wait(&mut cli, deadline, "client");
    let s = procs::wait(&mut srv, deadline + Duration::from_secs(5), "server");
    let ctx = format!("--- server\n{}--- client\n{}", text(&s), text(&c));
    let ok = |o: &std::process::Output| o.status.success() || procs::rping_exit_race(o);
    assert!(ok(&s) && ok(&c), "{ctx}");
    (s, c, ctx)
}

/// The lines of `o`'s stdout that start with `prefix` (rping's pings).
fn pings(o: &std::process::Output, prefix: &str) -> usize {
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter(|l| l.starts_with(prefix))
        .count()
}

#[test]
fn a_bound_device_is_a_roce_port_and_connects_by_gid() {
    if !netns::available("a_bound_device_is_a_roce_port_and_connects_by_gid") {
        return;
    }
    let Lab { ns, dir, _dir } = Lab::new("roce1", 1, "192.0.2.2/24");
    netns::ip(&["-n", ns.name(0), "link", "set", "vr1", "mtu", "9000"]);
    run_child(
        &ns,
        0,
        "child_roce_port",
        &[
            ("VQP_SOFT_DEVICES", "3"),
            ("VQP_SOFT_NETDEV", "soft0=vr0,soft1=vr1"),
            ("VQP_SOFT_DIR", dir.to_str().unwrap()),
        ],
    );
}

/// The interface's MAC, from sysfs (the namespace's: `ip netns exec` mounts it).
fn mac(ifname: &str) -> [u8; 6] {
    let text = std::fs::read_to_string(format!("/sys/class/net/{ifname}/address")).unwrap();
    let mut m = [0u8; 6];
    for (d, p) in m.iter_mut().zip(text.trim().split(':')) {
        *d = u8::from_str_radix(p, 16).unwrap();
    }
    m
}

fn ifindex(ifname: &str) -> u32 {
    std::fs::read_to_string(format!("/sys/class/net/{ifname}/ifindex"))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// Reads a soft device's sysfs attribute through `ibv_read_sysfs_file`.
fn sysfs(dev: &str, file: &str) -> String {
    let dir = std::ffi::CString::new(format!("/sys/class/infiniband/{dev}")).unwrap();
    let file = std::ffi::CString::new(file).unwrap();
    let mut buf = [0 as core::ffi::c_char; 128];
    // SAFETY: NUL-terminated strings and a writable buffer of its length.
    let n = unsafe {
        vqp_softverbs::ibv_read_sysfs_file(dir.as_ptr(), file.as_ptr(), buf.as_mut_ptr(), 128)
    };
    assert!(n >= 0, "{dev}/{file:?} not readable");
    // SAFETY: NUL-terminated by the call.
    unsafe { CStr::from_ptr(buf.as_ptr()) }
        .to_string_lossy()
        .into_owned()
}

#[test]
#[ignore = "run in a network namespace by a_bound_device_is_a_roce_port_and_connects_by_gid"]
fn child_roce_port() {
    if !is_child("child_roce_port") {
        return;
    }
    let v = verbs();
    let o = Opts::default();
    let a = side(&v, "soft0", &o);
    // UCX is loaded by the time a bound device is open, on this thread, before any
    // thread of softverbs' own could run beside its memory hooks' start-up (see
    // `Transport::load_ucx`) — unless it cannot be loaded at all.
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    assert!(
        maps.contains("libucp.so") || vqp_softverbs::ucx::Ucp::get().is_err(),
        "UCX was not loaded when ibv_open_device returned"
    );
    let b = side(&v, "soft1", &o);

    // The port: Ethernet, no LID, MTU from the interface (1500 → 1024, 9000 → 4096).
    let pa = *a.ctx.query_port(1).unwrap().raw();
    let pb = *b.ctx.query_port(1).unwrap().raw();
    assert_eq!(pa.link_layer, IBV_LINK_LAYER_ETHERNET);
    assert_eq!((pa.lid, pa.state), (0, IBV_PORT_ACTIVE));
    assert_eq!((pa.active_mtu, pb.active_mtu), (IBV_MTU_1024, IBV_MTU_4096));
    assert!(a.ctx.query_port(1).unwrap().needs_grh());

    // The GID table: the default GID from the MAC, then the IPv4 address, RoCE v2.
    let mut ll = [0u8; 16];
    let m = mac("vr0");
    ll[..2].copy_from_slice(&[0xfe, 0x80]);
    ll[8..].copy_from_slice(&[m[0] ^ 2, m[1], m[2], 0xff, 0xfe, m[3], m[4], m[5]]);
    assert_eq!(*a.ctx.query_gid(1, 0).unwrap().as_bytes(), ll);
    assert_eq!(
        *a.ctx.query_gid(1, 1).unwrap().as_bytes(),
        v4([192, 0, 2, 1])
    );
    assert_eq!(
        *b.ctx.query_gid(1, 1).unwrap().as_bytes(),
        v4([192, 0, 2, 2])
    );
    assert_eq!(pa.gid_tbl_len, 2, "no IPv6 address but the link-local one");
    let mut e = std::mem::MaybeUninit::<vqp_softverbs::ibv_gid_entry>::zeroed();
    let size = std::mem::size_of::<vqp_softverbs::ibv_gid_entry>();
    // SAFETY: a live context and a writable entry of that size.
    let rc =
        unsafe { vqp_softverbs::_ibv_query_gid_ex(a.ctx.as_raw(), 1, 1, e.as_mut_ptr(), 0, size) };
    assert_eq!(rc, 0);
    // SAFETY: written by the call.
    let e = unsafe { e.assume_init() };
    assert_eq!(e.gid_type, vqp_softverbs::IBV_GID_TYPE_ROCE_V2);
    assert_eq!(e.ndev_ifindex, ifindex("vr0"));
    let mut table = [std::mem::MaybeUninit::<vqp_softverbs::ibv_gid_entry>::zeroed(); 4];
    // SAFETY: a live context and 4 writable entries.
    let n = unsafe {
        vqp_softverbs::_ibv_query_gid_table(b.ctx.as_raw(), table[0].as_mut_ptr(), 4, 0, size)
    };
    assert_eq!(n, 2);
    // SAFETY: the first two were written.
    let t1 = unsafe { table[1].assume_init() };
    // SAFETY: as above.
    assert_eq!(unsafe { t1.gid.raw }, v4([192, 0, 2, 2]));
    assert_eq!(t1.gid_type, vqp_softverbs::IBV_GID_TYPE_ROCE_V2);
    let mut t = 0u32;
    // SAFETY: a live context and a writable u32.
    assert_eq!(
        unsafe { vqp_softverbs::ibv_query_gid_type(a.ctx.as_raw(), 1, 1, &mut t) },
        0
    );
    assert_eq!(t, vqp_softverbs::IBV_GID_TYPE_SYSFS_ROCE_V2);

    // sysfs as the kernel shows an rdma_rxe port.
    assert_eq!(sysfs("soft0", "ports/1/link_layer"), "Ethernet");
    assert_eq!(
        sysfs("soft0", "ports/1/gids/1"),
        "0000:0000:0000:0000:0000:ffff:c000:0201"
    );
    assert_eq!(sysfs("soft0", "ports/1/gid_attrs/types/1"), "RoCE v2");
    assert_eq!(sysfs("soft0", "ports/1/gid_attrs/ndevs/1"), "vr0");
    assert_eq!(sysfs("soft0", "ports/1/lid"), "0x0");

    // The unbound soft2 is the InfiniBand port it always was.
    let c = side(&v, "soft2", &o);
    let pc = *c.ctx.query_port(1).unwrap().raw();
    assert_eq!((pc.link_layer, pc.lid), (IBV_LINK_LAYER_INFINIBAND, 3));
    assert_eq!(sysfs("soft2", "ports/1/link_layer"), "InfiniBand");

    // No GRH on a RoCE port: EINVAL for the QP's address and for an AH, as on mlx5.
    let lid_path = Path::new(1, Address::lid(2), b.qp.qp_num(), 0x10, 0x20);
    connect::to_init(&a.qp, &lid_path).unwrap();
    let (mut rtr, mask) = lid_path.rtr_attr();
    rtr.ah_attr.is_global = 0;
    // SAFETY: a live QP and a readable attribute.
    let rc = unsafe { vqp_softverbs::ibv_modify_qp(a.qp.as_raw(), &mut rtr, mask.bits() as i32) };
    assert_eq!(rc, libc::EINVAL, "RTR without a GRH");
    let mut ah = ibv_ah_attr {
        dlid: 2,
        port_num: 1,
        ..Default::default()
    };
    // SAFETY: a live PD and a readable attribute.
    let p = unsafe { vqp_softverbs::ibv_create_ah(a.pd.as_raw(), &mut ah) };
    assert!(p.is_null());
    assert_eq!(
        std::io::Error::last_os_error().raw_os_error(),
        Some(libc::EINVAL)
    );
    // A source GID index past the table is refused too.
    ah.is_global = 1;
    ah.grh.sgid_index = 2;
    ah.grh.dgid.raw = v4([192, 0, 2, 2]);
    // SAFETY: as above.
    assert!(unsafe { vqp_softverbs::ibv_create_ah(a.pd.as_raw(), &mut ah) }.is_null());

    // Connected by GID (from the IPv4 GID, index 1): an RDMA WRITE lands.
    let ga = vqp_host::sys::Gid::from_bytes(v4([192, 0, 2, 1]));
    let gb = vqp_host::sys::Gid::from_bytes(v4([192, 0, 2, 2]));
    let mut to_b = Path::new(1, Address::gid(gb, 1), b.qp.qp_num(), 0x10, 0x20);
    let mut to_a = Path::new(1, Address::gid(ga, 1), a.qp.qp_num(), 0x20, 0x10);
    to_b.access = o.qp_access;
    to_a.access = o.qp_access;
    connect::to_rtr(&a.qp, &to_b).unwrap();
    connect::to_rts(&a.qp, &to_b).unwrap();
    connect::connect(&b.qp, &to_a).unwrap();
    let (mut a, mut b) = (a, b);
    fill(&mut a, 7);
    bytes_mut(&mut b).fill(0);
    let mut sge = a.mr.sge(0, 4096).unwrap();
    let mut wr = send_wr(1, IBV_WR_RDMA_WRITE, std::slice::from_mut(&mut sge));
    rdma(&mut wr, &b.mr, 0);
    assert_eq!(post_status(&a, &mut wr), vqp_host::WcStatus::Success);
    assert_eq!(&bytes(&b)[..4096], &bytes(&a)[..4096]);

    // A datagram by GID: its GRH names the sender's IPv4 GID and ours, and the address
    // made from it answers from our IPv4 GID (index 1).
    let qkey = 0x1111;
    let ua = ud_side(&v, "soft0", qkey);
    let mut ub = ud_side(&v, "soft1", qkey);
    bytes_mut(&mut ub).fill(0);
    post_receive(&ub, 7, 0, 40 + 64);
    let ah = ah_to(&ua, v4([192, 0, 2, 2]));
    assert_eq!(
        ud_send(&ua, ah, ub.qp.qp_num(), qkey, 0, 64),
        vqp_host::WcStatus::Success
    );
    assert_eq!(poll_n(&ub.cq, 1)[0].status(), vqp_host::WcStatus::Success);
    assert_eq!(grh_gids(&ub), (v4([192, 0, 2, 1]), v4([192, 0, 2, 2])));
    let mut wc = ibv_wc {
        wc_flags: IBV_WC_GRH,
        ..Default::default()
    };
    let mut back = ibv_ah_attr::default();
    // SAFETY: a live context, a completion, the GRH at the head of the registered
    // buffer, and a writable attribute.
    let rc = unsafe {
        vqp_softverbs::ibv_init_ah_from_wc(
            ub.ctx.as_raw(),
            1,
            &mut wc,
            ub.mr.addr() as *mut vqp_softverbs::ibv_grh,
            &mut back,
        )
    };
    assert_eq!(rc, 0);
    // SAFETY: `raw` is the byte view of the GID union.
    assert_eq!(
        (back.grh.sgid_index, unsafe { back.grh.dgid.raw }),
        (1, v4([192, 0, 2, 1]))
    );
    // From the default GID (index 0) to the peer's: both link-local GIDs in the GRH.
    let ll_b = *b.ctx.query_gid(1, 0).unwrap().as_bytes();
    let ah0 = ah_from(&ua, ll_b, 0);
    bytes_mut(&mut ub).fill(0);
    post_receive(&ub, 8, 0, 40 + 64);
    assert_eq!(
        ud_send(&ua, ah0, ub.qp.qp_num(), qkey, 0, 64),
        vqp_host::WcStatus::Success
    );
    assert_eq!(poll_n(&ub.cq, 1)[0].status(), vqp_host::WcStatus::Success);
    assert_eq!(grh_gids(&ub), (ll, ll_b));
    // SAFETY: made above, destroyed once.
    assert_eq!(unsafe { vqp_softverbs::ibv_destroy_ah(ah0) }, 0);
    // A datagram is one packet of the port's MTU: 1024 on soft0 (vr0's 1500).
    assert_eq!(
        ud_send(&ua, ah, ub.qp.qp_num(), qkey, 0, 1025),
        vqp_host::WcStatus::LocLenErr
    );
    // SAFETY: made above, destroyed once.
    assert_eq!(unsafe { vqp_softverbs::ibv_destroy_ah(ah) }, 0);

    // The interface going down is PORT_ERR on the port's contexts, up again PORT_ACTIVE.
    let ns_ip = |args: &[&str]| netns::ip(args);
    ns_ip(&["link", "set", "vr1", "down"]);
    port_event(&b, AsyncEventKind::PortErr);
    assert_eq!(b.ctx.query_port(1).unwrap().raw().state, IBV_PORT_DOWN);
    assert_eq!(sysfs("soft1", "ports/1/state"), "1: DOWN");
    // The link control cannot bring the port up while its interface is down: no event.
    vqp_softverbs::set_link(1, false).unwrap();
    vqp_softverbs::set_link(1, true).unwrap();
    assert_eq!(b.ctx.pending_async_events().unwrap(), []);
    assert_eq!(b.ctx.query_port(1).unwrap().raw().state, IBV_PORT_DOWN);
    ns_ip(&["link", "set", "vr1", "up"]);
    port_event(&b, AsyncEventKind::PortActive);
    assert_eq!(b.ctx.query_port(1).unwrap().raw().state, IBV_PORT_ACTIVE);
    // The MTU follows the interface too.
    ns_ip(&["link", "set", "vr1", "mtu", "2200"]);
    std::thread::sleep(Duration::from_millis(400));
    assert_eq!(b.ctx.query_port(1).unwrap().raw().active_mtu, IBV_MTU_2048);
}

#[test]
fn the_gid_index_chosen_on_a_bound_port_is_its_ipv4_roce_v2_gid() {
    if !netns::available("the_gid_index_chosen_on_a_bound_port_is_its_ipv4_roce_v2_gid") {
        return;
    }
    let Lab { ns, dir, _dir } = Lab::new("rocegid", 1, "192.0.2.2/24");
    run_child(
        &ns,
        0,
        "child_gid_choice",
        &[
            ("VQP_SOFT_DEVICES", "3"),
            ("VQP_SOFT_NETDEV", "soft0=vr0,soft1=vr1"),
            ("VQP_SOFT_DIR", dir.to_str().unwrap()),
        ],
    );
}

#[test]
#[ignore = "run in a network namespace by the_gid_index_chosen_on_a_bound_port_is_its_ipv4_roce_v2_gid"]
fn child_gid_choice() {
    if !is_child("child_gid_choice") {
        return;
    }
    // Through the cdylib, as an application loads libibverbs: the GID types are read
    // with `_ibv_query_gid_ex`, which the loader finds by name.
    let lib = vqp_softverbs::find_cdylib().expect("the softverbs cdylib");
    // SAFETY: the library implements the libibverbs ABI.
    let v = unsafe { vqp_host::Verbs::load_from(&lib) }.expect("dlopen the provider");
    let open = |name: &str| vqp_host::Context::open(&v, Some(name)).unwrap();
    let (a, b, ib) = (open("soft0"), open("soft1"), open("soft2"));
    // Index 0 is the link-local default GID (RoCE v2 too); index 1 the IPv4 address.
    assert_eq!(a.default_gid_index(1).unwrap(), 1);
    assert_eq!(b.default_gid_index(1).unwrap(), 1);
    assert_eq!(ib.default_gid_index(1).unwrap(), 0, "an InfiniBand port");

    assert_eq!(
        *a.query_gid(1, 1).unwrap().as_bytes(),
        v4([192, 0, 2, 1]),
        "the chosen GID"
    );
    // vqp-host's endpoints use this choice when no GID index is set: `write_bw` without
    // `--gid-index` between two namespaces (tests/write_bw_roce.rs) checks it.
}

#[test]
fn an_interface_that_does_not_exist_is_an_error_at_open() {
    let exe = std::env::current_exe().unwrap();
    let dir = netns::TempDir(procs::namespace("roce-missing"));
    let dir = dir.0.clone();
    let mut c = Command::new(exe);
    c.args([
        "child_missing_interface",
        "--exact",
        "--ignored",
        "--nocapture",
    ])
    .env(CHILD, "child_missing_interface")
    .env("VQP_SOFT_NETDEV", "soft0=vqp-no-such0")
    .env("VQP_SOFT_DIR", &dir);
    check_child(c, "child_missing_interface");
}

#[test]
#[ignore = "run by an_interface_that_does_not_exist_is_an_error_at_open"]
fn child_missing_interface() {
    if !is_child("child_missing_interface") {
        return;
    }
    let v = verbs();
    let e = vqp_host::Context::open(&v, Some("soft0")).err();
    assert!(
        e.is_some(),
        "soft0 opened on an interface that does not exist"
    );
    assert_eq!(
        std::io::Error::last_os_error().raw_os_error(),
        Some(libc::ENODEV)
    );
    // soft1 is not bound: it opens, an InfiniBand port.
    let c = vqp_host::Context::open(&v, Some("soft1")).unwrap();
    assert_eq!(
        c.query_port(1).unwrap().raw().link_layer,
        IBV_LINK_LAYER_INFINIBAND
    );
}

#[test]
fn an_interface_without_address_or_down_at_start() {
    if !netns::available("an_interface_without_address_or_down_at_start") {
        return;
    }
    let Lab { ns, dir, _dir } = Lab::new("roce-start", 1, "192.0.2.2/24");
    // vn0 and vn1: a veth pair that is up but has no address (not even IPv6's
    // link-local one: `addrgenmode none`); vr1 down before start.
    let n = ns.name(0);
    netns::ip(&[
        "-n", n, "link", "add", "vn0", "type", "veth", "peer", "name", "vn1",
    ]);
    netns::ip(&["-n", n, "link", "set", "vn0", "addrgenmode", "none"]);
    netns::ip(&["-n", n, "link", "set", "vn0", "up"]);
    netns::ip(&["-n", n, "link", "set", "vn1", "up"]);
    netns::ip(&["-n", n, "link", "set", "vr1", "down"]);
    let exe = std::env::current_exe().unwrap();
    let mut c = ns.exec(0, &exe);
    c.args([
        "child_interface_at_start",
        "--exact",
        "--ignored",
        "--nocapture",
    ])
    .env(CHILD, "child_interface_at_start")
    .env("VQP_SOFT_NETDEV", "soft0=vn0,soft1=vr1")
    .env("VQP_SOFT_DIR", &dir);
    let run = start_cmd(&mut c);
    let out = procs::wait(
        &mut procs::Killed(Some(run)),
        std::time::Instant::now() + Duration::from_secs(60),
        "child_interface_at_start",
    );
    let all = text(&out);
    assert!(
        out.status.success() && all.contains("1 passed"),
        "child_interface_at_start: {}\n{all}",
        out.status
    );
    // The reason is said once, in one line, when the provider starts.
    let said = r#"vqp-softverbs: soft0 cannot be opened: interface "vn0" has no IP address"#;
    assert_eq!(all.matches(said).count(), 1, "{all}");
}

#[test]
#[ignore = "run in a network namespace by an_interface_without_address_or_down_at_start"]
fn child_interface_at_start() {
    if !is_child("child_interface_at_start") {
        return;
    }
    let v = verbs();
    // No address: no GID to give the port, so the device does not open (ENODEV, as for
    // an interface that does not exist), at once.
    let t = std::time::Instant::now();
    assert!(
        vqp_host::Context::open(&v, Some("soft0")).is_err(),
        "soft0 opened on an interface without an address"
    );
    assert_eq!(
        std::io::Error::last_os_error().raw_os_error(),
        Some(libc::ENODEV)
    );
    assert!(t.elapsed() < Duration::from_secs(1));
    // Down at start: the device opens, a RoCE port whose state is DOWN, with its GIDs;
    // the interface coming up is PORT_ACTIVE.
    let b = side(&v, "soft1", &Opts::default());
    let port = b.ctx.query_port(1).unwrap();
    assert_eq!(port.raw().state, IBV_PORT_DOWN);
    assert_eq!(port.raw().link_layer, IBV_LINK_LAYER_ETHERNET);
    assert_eq!(
        *b.ctx.query_gid(1, 1).unwrap().as_bytes(),
        v4([192, 0, 2, 2]),
        "the GID table is read from a down interface too"
    );
    netns::ip(&["link", "set", "vr1", "up"]);
    port_event(&b, AsyncEventKind::PortActive);
    assert_eq!(b.ctx.query_port(1).unwrap().raw().state, IBV_PORT_ACTIVE);
}

#[test]
fn processes_in_two_namespaces_connect_by_gid() {
    if !netns::available("processes_in_two_namespaces_connect_by_gid") {
        return;
    }
    let Lab { ns, dir, _dir } = Lab::new("roce2", 2, "192.0.2.2/24");
    let d = dir.to_str().unwrap().to_string();
    // The responder (soft0 in namespace 1, GID ::ffff:192.0.2.2) waits for the
    // requester's data; the requester (soft0 in namespace 0) writes it by GID.
    let exe = std::env::current_exe().unwrap();
    let spawn = |i: usize, name: &str| {
        let mut c = ns.exec(i, &exe);
        c.args([name, "--exact", "--ignored", "--nocapture"])
            .env(CHILD, name)
            .env("VQP_SOFT_DIR", &d)
            .env("VQP_SOFT_NETDEV", format!("soft0=vr{i}"))
            .env("VQP_ROCE_RENDEZVOUS", dir.join("rendezvous"));
        c
    };
    std::fs::create_dir_all(&dir).unwrap();
    let responder = procs::Killed(Some(start_cmd(&mut spawn(1, "child_responder"))));
    check_child(spawn(0, "child_requester"), "child_requester");
    let mut responder = responder;
    let out = procs::wait(
        &mut responder,
        std::time::Instant::now() + Duration::from_secs(30),
        "responder",
    );
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains("1 passed"),
        "responder: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The file through which the two children swap QP numbers and the responder's keys.
fn rendezvous() -> PathBuf {
    PathBuf::from(std::env::var_os("VQP_ROCE_RENDEZVOUS").unwrap())
}

fn wait_file(p: &std::path::Path) -> String {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        if let Ok(s) = std::fs::read_to_string(p) {
            if s.ends_with('\n') {
                return s;
            }
        }
        assert!(std::time::Instant::now() < deadline, "no {}", p.display());
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn write_file(p: &std::path::Path, text: &str) {
    let mut tmp = p.as_os_str().to_owned();
    tmp.push(".tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, p).unwrap();
}

#[test]
#[ignore = "run in a network namespace by processes_in_two_namespaces_connect_by_gid"]
fn child_responder() {
    if !is_child("child_responder") {
        return;
    }
    let v = verbs();
    let o = Opts::default();
    let mut b = side(&v, "soft0", &o);
    bytes_mut(&mut b).fill(0);
    let mut ub = ud_side(&v, "soft0", 0x2222);
    bytes_mut(&mut ub).fill(0);
    post_receive(&ub, 7, 0, 40 + 64);
    let base = rendezvous();
    write_file(
        &base.with_extension("b"),
        &format!(
            "{} {} {} {}\n",
            b.qp.qp_num(),
            b.mr.addr(),
            b.mr.rkey(),
            ub.qp.qp_num()
        ),
    );
    let a_qpn: u32 = wait_file(&base.with_extension("a")).trim().parse().unwrap();
    let ga = vqp_host::sys::Gid::from_bytes(v4([192, 0, 2, 1]));
    let mut to_a = Path::new(1, Address::gid(ga, 1), a_qpn, 0x20, 0x10);
    to_a.access = o.qp_access;
    connect::connect(&b.qp, &to_a).unwrap();
    write_file(&base.with_extension("b-ready"), "ready\n");
    // The requester writes 4 KiB of its pattern, then says so.
    wait_file(&base.with_extension("a-done"));
    let want: Vec<u8> = (0..4096u32)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(9))
        .collect();
    assert_eq!(&bytes(&b)[..4096], &want[..]);
    // The requester's datagram: its GRH names the requester's GID, not ours.
    assert_eq!(poll_n(&ub.cq, 1)[0].status(), vqp_host::WcStatus::Success);
    assert_eq!(grh_gids(&ub), (v4([192, 0, 2, 1]), v4([192, 0, 2, 2])));
}

#[test]
#[ignore = "run in a network namespace by processes_in_two_namespaces_connect_by_gid"]
fn child_requester() {
    if !is_child("child_requester") {
        return;
    }
    let v = verbs();
    let o = Opts::default();
    let mut a = side(&v, "soft0", &o);
    fill(&mut a, 9);
    let base = rendezvous();
    write_file(&base.with_extension("a"), &format!("{}\n", a.qp.qp_num()));
    let b = wait_file(&base.with_extension("b"));
    let f: Vec<u64> = b.split_whitespace().map(|x| x.parse().unwrap()).collect();
    let gb = vqp_host::sys::Gid::from_bytes(v4([192, 0, 2, 2]));
    let mut to_b = Path::new(1, Address::gid(gb, 1), f[0] as u32, 0x10, 0x20);
    to_b.access = o.qp_access;
    connect::connect(&a.qp, &to_b).unwrap();
    wait_file(&base.with_extension("b-ready"));
    let mut sge = a.mr.sge(0, 4096).unwrap();
    let mut wr = send_wr(1, IBV_WR_RDMA_WRITE, std::slice::from_mut(&mut sge));
    wr.wr.rdma = ibv_send_wr_rdma {
        remote_addr: f[1],
        rkey: f[2] as u32,
    };
    assert_eq!(post_status(&a, &mut wr), vqp_host::WcStatus::Success);
    let ua = ud_side(&v, "soft0", 0x2222);
    let ah = ah_to(&ua, v4([192, 0, 2, 2]));
    assert_eq!(
        ud_send(&ua, ah, f[3] as u32, 0x2222, 0, 64),
        vqp_host::WcStatus::Success
    );
    write_file(&base.with_extension("a-done"), "done\n");
}

#[test]
fn the_launcher_presents_a_bound_port_in_sysfs() {
    if !netns::available("the_launcher_presents_a_bound_port_in_sysfs") {
        return;
    }
    let lab = Lab::new("roce3", 1, "198.51.100.1/24");
    let mut c = lab.launcher(&["--netdev", "soft1=vr1"]);
    let sys = "/sys/class/infiniband";
    c.args(["sh", "-c"]).arg(format!(
        "cat {sys}/soft1/ports/1/link_layer {sys}/soft1/ports/1/lid \
             {sys}/soft1/ports/1/gids/1 {sys}/soft1/ports/1/gid_attrs/types/1 \
             {sys}/soft1/ports/1/gid_attrs/ndevs/1 {sys}/soft0/ports/1/link_layer \
             {sys}/soft0/ports/1/gid_attrs/types/0; echo netdev=$VQP_SOFT_NETDEV"
    ));
    let out = c.output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}\n{text}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        text.lines().collect::<Vec<_>>(),
        [
            "Ethernet",
            "0x0",
            "0000:0000:0000:0000:0000:ffff:c633:6401",
            "RoCE v2",
            "vr1",
            "InfiniBand",
            "IB/RoCE v1",
            "netdev=soft1=vr1"
        ]
    );
}

#[path = "system/mod.rs"]
mod system;

#[test]
fn ibv_rc_pingpong_by_gid_between_two_namespaces() {
    let test = "ibv_rc_pingpong_by_gid_between_two_namespaces";
    let Some(prog) = system::program(test, "ibv_rc_pingpong", "ibverbs-utils") else {
        return;
    };
    if !netns::available(test) {
        return;
    }
    let Lab { ns, dir, _dir } = Lab::new("roce4", 2, "192.0.2.2/24");
    let lib = vqp_softverbs::find_cdylib().expect("the softverbs cdylib");
    let port = procs::free_port().to_string();
    let side = |i: usize, extra: &[&str]| {
        let mut c = ns.exec(i, &prog);
        c.args(["-d", "soft0", "-g", "1", "-n", "200", "-p", &port])
            .args(extra)
            .env("LD_PRELOAD", &lib)
            .env("VQP_SOFT_DIR", &dir)
            .env("VQP_SOFT_NETDEV", format!("soft0=vr{i}"));
        c
    };
    let (s, c, ctx) = server_and_client(
        side(0, &[]),
        |pid| netns::listening_in(pid, port.parse().unwrap()),
        side(1, &["192.0.2.1"]),
    );
    // Each side names its own RoCE GID and the peer's, and completes its iterations.
    for (o, local, remote) in [
        (&s, "192.0.2.1", "192.0.2.2"),
        (&c, "192.0.2.2", "192.0.2.1"),
    ] {
        let t = text(o);
        assert!(t.contains("local address:  LID 0x0000"), "{ctx}");
        assert!(t.contains(&format!("GID ::ffff:{local}")), "{ctx}");
        assert!(t.contains(&format!("GID ::ffff:{remote}")), "{ctx}");
        assert!(t.contains("200 iters in"), "{ctx}");
    }
}

/// Whether an RDMA-CM listener on TCP-space `port` has bound its socket in `dir` (the
/// softverbs namespace directory, where vqp-rdmacm keeps its listeners).
fn cm_listening(dir: &std::path::Path, port: u16) -> bool {
    let tail = format!("-{port}");
    std::fs::read_dir(dir.join("rdmacm")).is_ok_and(|it| {
        it.flatten().any(|e| {
            let n = e.file_name();
            let n = n.to_string_lossy();
            n.starts_with("l-") && n.ends_with(&tail)
        })
    })
}

/// `softverbs run --netdev` with the RDMA-CM preload: Debian's `rping` (server and
/// client, two processes in one network namespace) connects through vqp-rdmacm to the
/// address of the interface soft0 is bound to, so its QPs are on a RoCE port, whose
/// address vectors need a GRH; three pings, every byte checked (`-V`).
#[test]
fn rping_through_rdma_cm_on_a_bound_device() {
    let test = "rping_through_rdma_cm_on_a_bound_device";
    let Some(_) = system::program(test, "rping", "rdmacm-utils") else {
        return;
    };
    if !netns::available(test) {
        return;
    }
    let lab = Lab::new("roce5", 1, "198.51.100.1/24");
    let lib = rdmacm_lib();
    let port = procs::free_port();
    let p = port.to_string();
    let side = |role: &str| {
        let mut c = lab.launcher(&["--netdev", "soft0=vr0"]);
        c.args(["rping", role, "-a", "192.0.2.1", "-p", &p])
            .args(["-v", "-V", "-C", "3"])
            .env("VQP_RDMACM_LIB", &lib);
        c
    };
    let (s, c, ctx) = server_and_client(side("-s"), |_| cm_listening(&lab.dir, port), side("-c"));
    assert_eq!(pings(&c, "ping data: rdma-ping-"), 3, "{ctx}");
    assert_eq!(pings(&s, "server ping data: rdma-ping-"), 3, "{ctx}");
}

/// Addressing per bound interface (vqp-rdmacm): with soft1 and soft2 bound to the two
/// ends of a veth pair (192.0.2.1, 192.0.2.2) and soft0 bound to an interface that is
/// down, `rping` from 192.0.2.1 (`-I`) to a server at 192.0.2.2 runs over soft1 and
/// soft2 — the devices that own those addresses — and not over soft0, whose port is
/// down (a connection that fell back to soft0 fails its first transfer); three pings,
/// every byte checked.
#[test]
fn rping_runs_over_the_devices_bound_to_its_addresses() {
    let test = "rping_runs_over_the_devices_bound_to_its_addresses";
    let Some(_) = system::program(test, "rping", "rdmacm-utils") else {
        return;
    };
    if !netns::available(test) {
        return;
    }
    let lab = Lab::new("roce6", 1, "192.0.2.2/24");
    // An interface that stays down, with an address of its own.
    let n = lab.ns.name(0);
    netns::ip(&[
        "-n", n, "link", "add", "vd0", "type", "veth", "peer", "name", "vd1",
    ]);
    netns::ip(&["-n", n, "addr", "add", "198.51.100.1/24", "dev", "vd0"]);
    let lib = rdmacm_lib();
    let port = procs::free_port();
    let p = port.to_string();
    let side = |args: &[&str]| {
        let mut c = lab.launcher(&[
            "--devices",
            "3",
            "--netdev",
            "soft0=vd0,soft1=vr0,soft2=vr1",
        ]);
        c.arg("rping")
            .args(args)
            .args(["-a", "192.0.2.2", "-p", &p, "-v", "-V", "-C", "3"])
            .env("VQP_RDMACM_LIB", &lib);
        c
    };
    let (s, c, ctx) = server_and_client(
        side(&["-s"]),
        |_| cm_listening(&lab.dir, port),
        side(&["-c", "-I", "192.0.2.1"]),
    );
    assert_eq!(pings(&c, "ping data: rdma-ping-"), 3, "{ctx}");
    assert_eq!(pings(&s, "server ping data: rdma-ping-"), 3, "{ctx}");
}

#[test]
fn a_request_to_a_gid_on_no_machine_is_retried_until_retry_exc() {
    if !netns::available("a_request_to_a_gid_on_no_machine_is_retried_until_retry_exc") {
        return;
    }
    // 192.0.2.2 is vr1's, in the other namespace, where no softverbs process runs.
    let Lab { ns, dir, _dir } = Lab::new("roce7", 2, "192.0.2.2/24");
    run_child(
        &ns,
        0,
        "child_gid_on_no_machine",
        &[
            ("VQP_SOFT_NETDEV", "soft0=vr0"),
            ("VQP_SOFT_DIR", dir.to_str().unwrap()),
        ],
    );
}

#[test]
#[ignore = "run in a network namespace by a_request_to_a_gid_on_no_machine_is_retried_until_retry_exc"]
fn child_gid_on_no_machine() {
    if !is_child("child_gid_on_no_machine") {
        return;
    }
    let v = verbs();
    let o = Opts::default();
    let a = side(&v, "soft0", &o);
    // A GID no device of the namespace has: the QP's requests go to another machine,
    // where nobody serves QP 0x123. Each attempt waits 4.096 µs · 2^14 ≈ 67 ms; the
    // first transmission and 3 retransmissions are lost, then RETRY_EXC.
    let gb = vqp_host::sys::Gid::from_bytes(v4([192, 0, 2, 2]));
    let mut to_b = Path::new(1, Address::gid(gb, 1), 0x123, 0x10, 0x20);
    to_b.access = o.qp_access;
    to_b.timeout = 14;
    to_b.retry_cnt = 3;
    connect::connect(&a.qp, &to_b).unwrap();
    let start = std::time::Instant::now();
    for id in [1, 2] {
        let mut sge = a.mr.sge(0, 64).unwrap();
        let mut wr = send_wr(id, IBV_WR_RDMA_WRITE, std::slice::from_mut(&mut sge));
        wr.wr.rdma = ibv_send_wr_rdma {
            remote_addr: 0x1000,
            rkey: 7,
        };
        post(&a, &mut wr);
    }
    // The failed WQE, then the one behind it flushed (they come together).
    let wcs = poll_n(&a.cq, 2);
    let took = start.elapsed();
    let got: Vec<_> = wcs.iter().map(|w| (w.wr_id(), w.status())).collect();
    assert_eq!(
        got,
        [
            (1, vqp_host::WcStatus::RetryExcErr),
            (2, vqp_host::WcStatus::WrFlushErr)
        ]
    );
    // Three ACK timeouts of about 67 ms, and never much longer.
    assert!(
        took >= Duration::from_millis(190) && took < Duration::from_secs(3),
        "RETRY_EXC after {took:?}"
    );
}

#[test]
fn discovery_finds_the_process_serving_a_qp_on_another_machine() {
    if !netns::available("discovery_finds_the_process_serving_a_qp_on_another_machine") {
        return;
    }
    if !ucx_available("discovery_finds_the_process_serving_a_qp_on_another_machine") {
        return;
    }
    let Lab { ns, dir, _dir } = Lab::new("roce8", 2, "192.0.2.2/24");
    // Each namespace its own softverbs namespace: nothing is shared but the veth.
    let exe = std::env::current_exe().unwrap();
    let spawn = |i: usize, name: &str| {
        let own = dir.join(format!("ns{i}"));
        std::fs::create_dir_all(&own).unwrap();
        let mut c = ns.exec(i, &exe);
        c.args([name, "--exact", "--ignored", "--nocapture"])
            .env(CHILD, name)
            .env("VQP_SOFT_DIR", &own)
            .env("VQP_SOFT_NETDEV", format!("soft0=vr{i}"))
            .env("VQP_ROCE_RENDEZVOUS", dir.join("rendezvous"));
        c
    };
    let mut server = procs::Killed(Some(start_cmd(&mut spawn(1, "child_served"))));
    let asker = procs::Killed(Some(start_cmd(&mut spawn(0, "child_asker"))));
    let out = procs::wait(
        &mut server,
        std::time::Instant::now() + Duration::from_secs(30),
        "child_served",
    );
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains("1 passed"),
        "child_served: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // The serving process is gone: the asker's next lookup is refused.
    write_file(&dir.join("rendezvous").with_extension("b-gone"), "gone\n");
    let mut asker = asker;
    let out = procs::wait(
        &mut asker,
        std::time::Instant::now() + Duration::from_secs(30),
        "child_asker",
    );
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains("1 passed"),
        "child_asker: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Whether UCX (Debian's `libucx0`) can be loaded; prints a line naming the package
/// when it cannot, and fails instead under `VQP_REQUIRE_SYSTEM_PACKAGES=1`.
fn ucx_available(test: &str) -> bool {
    match vqp_softverbs::ucx::Ucp::get() {
        Ok(_) => true,
        Err(e) => {
            assert!(
                std::env::var_os("VQP_REQUIRE_SYSTEM_PACKAGES").is_none(),
                "{test}: {e}"
            );
            println!("skipped {test}: needs libucx0 ({e})");
            false
        }
    }
}

#[test]
#[ignore = "run in a network namespace by discovery_finds_the_process_serving_a_qp_on_another_machine"]
fn child_served() {
    if !is_child("child_served") {
        return;
    }
    let v = verbs();
    let b = side(&v, "soft0", &Opts::default());
    let base = rendezvous();
    write_file(&base.with_extension("b"), &format!("{}\n", b.qp.qp_num()));
    wait_file(&base.with_extension("a-done"));
}

#[test]
#[ignore = "run in a network namespace by discovery_finds_the_process_serving_a_qp_on_another_machine"]
fn child_asker() {
    if !is_child("child_asker") {
        return;
    }
    use vqp_softverbs::ucx::lookup::{lookup, LookupError, DEFAULT_PORT};
    let base = rendezvous();
    let qpn: u32 = wait_file(&base.with_extension("b")).trim().parse().unwrap();
    let at: std::net::SocketAddr = format!("192.0.2.2:{DEFAULT_PORT}").parse().unwrap();
    let gid = v4([192, 0, 2, 2]);
    let limit = Duration::from_secs(2);
    // The serving process has just opened its device: its lookup socket may not be
    // there yet.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let port = loop {
        match lookup(at, &gid, qpn, limit) {
            Ok(p) => break p,
            Err(LookupError::Connect(e)) if std::time::Instant::now() < deadline => {
                let _ = e;
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => panic!("lookup of QP {qpn}: {e}"),
        }
    };
    let served = port.expect("the QP's process is found");
    assert_eq!(served.ip(), at.ip(), "served at the address asked");
    let port = served.port();
    assert!(port != 0 && port != DEFAULT_PORT, "UCX port {port}");
    // A QP nobody there has, and a GID no device there has: nobody.
    assert_eq!(lookup(at, &gid, qpn + 1, limit).unwrap(), None);
    assert_eq!(lookup(at, &v4([192, 0, 2, 9]), qpn, limit).unwrap(), None);
    write_file(&base.with_extension("a-done"), "done\n");
    // Once the process is gone, nobody listens there: refused at once.
    wait_file(&base.with_extension("b-gone"));
    let t = std::time::Instant::now();
    assert!(matches!(
        lookup(at, &gid, qpn, limit),
        Err(LookupError::Connect(_))
    ));
    assert!(t.elapsed() < limit, "took {:?}", t.elapsed());
}

/// `scripts/hosts.sh`, run with the prefix and directory of this test.
struct Hosts {
    prefix: String,
    dir: PathBuf,
}

impl Hosts {
    fn new(tag: &str) -> Hosts {
        // The script takes 1-16 lower-case letters, digits and '-'.
        let prefix = format!("vqp{tag}{}", std::process::id() % 1_000_000);
        let dir = std::env::temp_dir().join(&prefix);
        Hosts { prefix, dir }
    }

    /// `hosts.sh ARGS`, with `path` first in `PATH` when given.
    fn run(&self, args: &[&str], path: Option<&std::path::Path>) -> std::process::Output {
        let mut c = Command::new(concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/hosts.sh"));
        c.args(args)
            .env("VQP_HOSTS_PREFIX", &self.prefix)
            .env("VQP_HOSTS_DIR", &self.dir);
        if let Some(p) = path {
            let old = std::env::var_os("PATH").unwrap_or_default();
            let mut paths = vec![p.to_path_buf()];
            paths.extend(std::env::split_paths(&old));
            c.env("PATH", std::env::join_paths(paths).unwrap());
        }
        c.output().expect("run hosts.sh")
    }

    /// `hosts.sh ARGS`, which must succeed; its stdout.
    fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args, None);
        assert!(
            out.status.success(),
            "hosts.sh {args:?}: {}\n{}",
            out.status,
            text(&out)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// This prefix's namespaces.
    fn namespaces(&self) -> Vec<String> {
        let out = Command::new("ip").args(["netns", "list"]).output().unwrap();
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| l.split_whitespace().next())
            .filter(|n| n.starts_with(&format!("{}-", self.prefix)))
            .map(str::to_string)
            .collect()
    }

    /// Checks that nothing the script makes is left: no namespace, no directory, and the
    /// links of this namespace are those of `links_before`.
    fn check_gone(&self, links_before: &str, when: &str) {
        assert_eq!(self.namespaces(), Vec::<String>::new(), "{when}");
        assert!(!self.dir.exists(), "{when}: {} left", self.dir.display());
        assert_eq!(
            root_links(),
            links_before,
            "{when}: links of this namespace"
        );
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        let _ = self.run(&["down"], None);
    }
}

/// This network namespace's interfaces, by name.
fn root_links() -> String {
    let out = Command::new("ip").args(["-br", "link"]).output().unwrap();
    let mut names: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .collect();
    names.sort();
    names.join(" ")
}

/// Whether `ping` runs; otherwise says so on one line (or panics when system packages
/// are required).
fn ping_available(test: &str) -> bool {
    let ok = Command::new("ping")
        .arg("-V")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        let line = format!("skipped {test}: ping needs the Debian package iputils-ping");
        assert!(
            std::env::var("VQP_REQUIRE_SYSTEM_PACKAGES").as_deref() != Ok("1"),
            "{line}; VQP_REQUIRE_SYSTEM_PACKAGES=1 says it must run"
        );
        eprintln!("{line}");
    }
    ok
}

#[test]
fn the_hosts_script_makes_hosts_that_ping_and_removes_them_also_after_a_failed_step() {
    let test = "the_hosts_script_makes_hosts_that_ping_and_removes_them_also_after_a_failed_step";
    if !netns::available(test) || !ping_available(test) {
        return;
    }
    let h = Hosts::new("hs");
    let links = root_links();
    h.ok(&["up", "-l", "2"]);
    assert_eq!(
        h.namespaces().len(),
        2,
        "two hosts, joined directly: {:?}",
        h.namespaces()
    );
    for (from, to) in [
        ("0", "192.0.2.2"),
        ("0", "198.51.100.2"),
        ("1", "192.0.2.1"),
        ("1", "198.51.100.1"),
    ] {
        h.ok(&["exec", from, "--", "ping", "-c", "1", "-W", "2", to]);
    }
    let env = h.ok(&[
        "exec",
        "1",
        "--",
        "sh",
        "-c",
        "echo $VQP_SOFT_DIR $VQP_SOFT_NETDEV",
    ]);
    assert_eq!(
        env.trim(),
        format!("{} soft0=eth0,soft1=eth1", h.dir.join("h1").display())
    );
    h.ok(&["rate", "0", "1", "1gbit"]);
    let tc = h.ok(&["exec", "0", "--", "tc", "qdisc", "show", "dev", "eth1"]);
    assert!(tc.contains("tbf") && tc.contains("rate 1Gbit"), "{tc}");
    h.ok(&["rate", "0", "1", "off"]);
    // A second `up` refuses and leaves the hosts as they are.
    assert!(!h.run(&["up"], None).status.success());
    assert_eq!(h.namespaces().len(), 2);
    h.ok(&["down"]);
    h.check_gone(&links, "after down");
    h.ok(&["down"]);

    // Three hosts through a hub: host 2 reaches host 0.
    h.ok(&["up", "-n", "3"]);
    h.ok(&["exec", "2", "--", "ping", "-c", "1", "-W", "2", "192.0.2.1"]);
    h.ok(&["down"]);
    h.check_gone(&links, "after down of three hosts");

    // A step that fails midway (the address of host 1's second link, by an `ip` that
    // refuses it): `up` fails and removes what it had made.
    let fake = netns::TempDir(procs::namespace("hosts-fake-ip"));
    std::fs::create_dir_all(&fake.0).unwrap();
    let ip = fake.0.join("ip");
    let real = ["/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists())
        .expect("ip");
    std::fs::write(
        &ip,
        format!(
            "#!/bin/sh\ncase \"$*\" in *198.51.100.2/*) echo refused >&2; exit 2;; esac\n\
             exec {real} \"$@\"\n"
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&ip, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = h.run(&["up", "-l", "2"], Some(&fake.0));
    let said = text(&out);
    assert!(!out.status.success(), "up with a failing step: {said}");
    assert!(said.contains("up failed: removing what it made"), "{said}");
    h.check_gone(&links, "after a failed up");
}

#[test]
fn hostile_peers_at_the_lookup_port_neither_stop_nor_slow_lookups_nor_hurt_qps() {
    hostile_peers(
        "hostile_peers_at_the_lookup_port_neither_stop_nor_slow_lookups_nor_hurt_qps",
        "roce9",
        false,
    );
}

/// As above, with a peer that meanwhile connects and stalls every 5 ms: the lookups
/// are answered still (the listener reads a connection's question as it takes it,
/// and what it holds before taking more, so stalled connections arriving after a
/// lookup cannot push it out unread; `ucx::lookup`'s unit tests show that turn alone).
#[test]
fn a_peer_stalling_connections_at_200_a_second_does_not_deny_lookups() {
    hostile_peers(
        "a_peer_stalling_connections_at_200_a_second_does_not_deny_lookups",
        "roce10",
        true,
    );
}

/// Runs the two children of the hostile-peers tests in two namespaces, each with its
/// own softverbs namespace; `staller`: with a concurrent stalling peer.
fn hostile_peers(test: &str, tag: &str, staller: bool) {
    if !netns::available(test) || !ucx_available(test) {
        return;
    }
    let Lab { ns, dir, _dir } = Lab::new(tag, 2, "192.0.2.2/24");
    // Each namespace its own softverbs namespace: nothing is shared but the veth.
    let exe = std::env::current_exe().unwrap();
    let spawn = |i: usize, name: &str| {
        let own = dir.join(format!("ns{i}"));
        std::fs::create_dir_all(&own).unwrap();
        let mut c = ns.exec(i, &exe);
        c.args([name, "--exact", "--ignored", "--nocapture"])
            .env(CHILD, name)
            .env("VQP_SOFT_DIR", &own)
            .env("VQP_SOFT_NETDEV", format!("soft0=vr{i}"))
            .env("VQP_ROCE_RENDEZVOUS", dir.join("rendezvous"));
        c
    };
    let server = procs::Killed(Some(start_cmd(&mut spawn(1, "child_lookup_served"))));
    let mut hostile = spawn(0, "child_lookup_hostile");
    if staller {
        hostile.env("VQP_LOOKUP_STALLER", "1");
    }
    check_child(hostile, "child_lookup_hostile");
    let mut server = server;
    let out = procs::wait(
        &mut server,
        std::time::Instant::now() + Duration::from_secs(30),
        "child_lookup_served",
    );
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains("1 passed"),
        "child_lookup_served: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// This process's open descriptors and resident memory in KiB.
fn fds_and_rss() -> (usize, u64) {
    let fds = std::fs::read_dir("/proc/self/fd").unwrap().count();
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let rss = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap();
    (fds, rss)
}

/// Two QPs of `a` and `b` on soft0 (192.0.2.2) connected to each other by GID; an RDMA
/// WRITE of 4 KiB from `a` lands in `b` (`seed` its pattern).
fn write_lands(a: &mut Side, b: &mut Side, seed: u8) {
    fill(a, seed);
    bytes_mut(b).fill(0);
    let mut sge = a.mr.sge(0, 4096).unwrap();
    let mut wr = send_wr(
        u64::from(seed),
        IBV_WR_RDMA_WRITE,
        std::slice::from_mut(&mut sge),
    );
    rdma(&mut wr, &b.mr, 0);
    assert_eq!(post_status(a, &mut wr), vqp_host::WcStatus::Success);
    assert_eq!(&bytes(b)[..4096], &bytes(a)[..4096]);
}

#[test]
#[ignore = "run in a network namespace by the hostile-peers tests"]
fn child_lookup_served() {
    if !is_child("child_lookup_served") {
        return;
    }
    let v = verbs();
    let o = Opts::default();
    let (mut a, mut b) = (side(&v, "soft0", &o), side(&v, "soft0", &o));
    let g = vqp_host::sys::Gid::from_bytes(v4([192, 0, 2, 2]));
    let mut to_b = Path::new(1, Address::gid(g, 1), b.qp.qp_num(), 0x10, 0x20);
    let mut to_a = Path::new(1, Address::gid(g, 1), a.qp.qp_num(), 0x20, 0x10);
    to_b.access = o.qp_access;
    to_a.access = o.qp_access;
    connect::connect(&a.qp, &to_b).unwrap();
    connect::connect(&b.qp, &to_a).unwrap();
    write_lands(&mut a, &mut b, 3);
    let base = rendezvous();
    write_file(&base.with_extension("b"), &format!("{}\n", b.qp.qp_num()));
    // Served and asked once: the lookup socket and its thread are there.
    wait_file(&base.with_extension("a-ready"));
    let (fds, rss) = fds_and_rss();
    write_file(&base.with_extension("b-measured"), "measured\n");
    wait_file(&base.with_extension("a-done"));
    // Past the listener's deadline (200 ms) for the last of them.
    std::thread::sleep(Duration::from_millis(500));
    let (fds_after, rss_after) = fds_and_rss();
    assert!(
        fds_after <= fds + 1,
        "descriptors: {fds} before the hostile peers, {fds_after} after"
    );
    assert!(
        rss_after < rss + 8 * 1024,
        "resident memory: {rss} KiB before the hostile peers, {rss_after} KiB after"
    );
    // The QPs work as before.
    write_lands(&mut a, &mut b, 4);
}

#[test]
#[ignore = "run in a network namespace by the hostile-peers tests"]
fn child_lookup_hostile() {
    if !is_child("child_lookup_hostile") {
        return;
    }
    use std::io::{Read as _, Write as _};
    use std::net::TcpStream;
    use std::time::Instant;
    use vqp_softverbs::ucx::lookup::{lookup, LookupError, DEFAULT_PORT};
    let base = rendezvous();
    let qpn: u32 = wait_file(&base.with_extension("b")).trim().parse().unwrap();
    let at: std::net::SocketAddr = format!("192.0.2.2:{DEFAULT_PORT}").parse().unwrap();
    let gid = v4([192, 0, 2, 2]);
    let deadline = Instant::now() + Duration::from_secs(10);
    let port = loop {
        match lookup(at, &gid, qpn, Duration::from_secs(2)) {
            Ok(p) => break p.expect("the QP's process is found"),
            Err(LookupError::Connect(_)) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => panic!("lookup of QP {qpn}: {e}"),
        }
    };
    write_file(&base.with_extension("a-ready"), "ready\n");
    wait_file(&base.with_extension("b-measured"));

    // The serving side closes a lookup connection 200 ms after it came; a well-formed
    // lookup among the hostile ones must be answered well within that.
    let served_within = Duration::from_millis(200);
    let connect = || {
        let s = TcpStream::connect_timeout(&at, Duration::from_secs(2)).unwrap();
        s.set_write_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        s
    };
    // The question, by the table in the lookup module's docs.
    let mut q = [0u8; 28];
    q[..4].copy_from_slice(b"VQPL");
    q[4] = 4;
    q[8..12].copy_from_slice(&qpn.to_be_bytes());
    q[12..].copy_from_slice(&gid);
    let mut x = 0x1234_5678u32;
    let mut junk = |n: usize| -> Vec<u8> {
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                x as u8
            })
            .collect()
    };
    // With VQP_LOOKUP_STALLER set, another peer meanwhile connects and stalls every
    // 5 ms (200 connections a second).
    let concurrent = std::env::var_os("VQP_LOOKUP_STALLER").is_some();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(!concurrent));
    let staller = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut held = Vec::new();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                if let Ok(s) = TcpStream::connect_timeout(&at, Duration::from_secs(2)) {
                    held.push(s);
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            held
        })
    };
    // (connection, what it sent, whether it may be answered once: a whole question
    // followed by more bytes is answered or refused, as the listener reads exactly a
    // question's bytes and may close before the rest is there)
    let mut held: Vec<(TcpStream, &str, bool)> = Vec::new();
    let mut worst = Duration::ZERO;
    for round in 0..8 {
        for _ in 0..8 {
            held.push((connect(), "nothing", false));
        }
        for n in [1, 5, 12, 27] {
            let mut s = connect();
            s.write_all(&q[..n]).unwrap();
            held.push((s, "a truncated question", false));
        }
        for _ in 0..4 {
            let mut s = connect();
            s.write_all(&junk(28)).unwrap();
            held.push((s, "garbage", false));
        }
        for (head, what) in [
            (&q[..], "a question and 256 KiB more"),
            (&[][..], "256 KiB of garbage"),
        ] {
            let mut s = connect();
            let mut big = head.to_vec();
            big.extend(junk(256 << 10));
            // Closed under it (after the first 28 bytes) or blocked: either is fine.
            let _ = s.write_all(&big);
            held.push((s, what, !head.is_empty()));
        }
        // Out of order: an answer where a question belongs, and a question with a
        // version, QPN or padding not ours.
        let mut s = connect();
        let mut answer_first = b"VQPA\x04\x00\x0f\xa0".to_vec();
        answer_first.resize(28, 0);
        s.write_all(&answer_first).unwrap();
        held.push((s, "an answer", false));
        for (i, v) in [(4, 1u8), (8, 1), (6, 9)] {
            let mut bad = q;
            bad[i] = v;
            let mut s = connect();
            s.write_all(&bad).unwrap();
            held.push((s, "a question with a field out of range", false));
        }
        // Two questions on one connection: one answer.
        let mut s = connect();
        s.write_all(&[q, q].concat()).unwrap();
        held.push((s, "two questions", true));

        // A lookup among them.
        let t = Instant::now();
        let r = lookup(at, &gid, qpn, Duration::from_secs(2));
        let r = r.unwrap_or_else(|e| panic!("round {round}: after {:?}: {e}", t.elapsed()));
        assert_eq!(r, Some(port));
        worst = worst.max(t.elapsed());
        assert_eq!(
            lookup(at, &gid, qpn + 1, Duration::from_secs(2)).unwrap(),
            None,
            "a QP nobody has"
        );
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let stalled = staller.join().unwrap();
    assert!(
        worst < served_within,
        "a lookup among hostile peers took {worst:?}"
    );
    // Every hostile connection is closed by the server within its deadline, having
    // been answered only when it asked a well-formed question.
    std::thread::sleep(served_within + Duration::from_millis(100));
    for (mut s, what, answered) in held {
        s.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
        let mut got = Vec::new();
        let r = s.read_to_end(&mut got);
        assert!(
            r.is_ok() || matches!(r, Err(ref e) if e.kind() == std::io::ErrorKind::ConnectionReset),
            "{what}: still open ({r:?})"
        );
        if answered && !got.is_empty() {
            // The answer to the question: served at the UCX address found above.
            let mut a = b"VQPA\x04\x00".to_vec();
            a.extend_from_slice(&port.port().to_be_bytes());
            a.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 192, 0, 2, 2]);
            assert_eq!(got, a, "{what}: answered {got:?}");
        } else {
            assert!(got.is_empty(), "{what}: answered {got:?}");
        }
    }
    for mut s in stalled {
        s.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
        let r = s.read(&mut [0u8; 1]);
        assert!(
            matches!(r, Ok(0)) || r.is_err_and(|e| e.kind() == std::io::ErrorKind::ConnectionReset),
            "a stalled peer still open"
        );
    }
    write_file(&base.with_extension("a-done"), "done\n");
}
