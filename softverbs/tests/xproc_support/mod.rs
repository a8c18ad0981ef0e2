//! Two-process rig: the test binary re-runs itself as a child (its `child` test, with
//! `VQP_XPROC_CHILD` set, driven through `child`) that owns one side of a connection.
//! This file holds the child's commands and the namespace the two share.
#![allow(dead_code)]

#[path = "../child/mod.rs"]
pub mod child;

use std::ops::{Deref, DerefMut};
use std::path::PathBuf;
use std::sync::{Once, OnceLock};
use std::time::Duration;

use child::{out, Driver};
use vqp_host::connect::{self, Address, Path};
use vqp_host::sys::*;

use crate::common::{self, Opts, Side};

/// Set in the child's environment.
pub const ENV_CHILD: &str = "VQP_XPROC_CHILD";
/// How long one child command may take.
pub const STEP: Duration = Duration::from_secs(20);

static DIR: Once = Once::new();
/// The namespace directory [`remove_namespace`] removes at exit.
static MADE: OnceLock<PathBuf> = OnceLock::new();

/// This test process's namespace directory (its children use their parent's).
pub fn namespace_dir(pid: u32) -> PathBuf {
    std::env::temp_dir().join(format!("vqp-xproc-{pid}"))
}

/// Gives this test binary (and its children) a namespace of its own, before the
/// provider starts; the directory is removed when the process exits.
pub fn isolate() -> PathBuf {
    let dir = namespace_dir(std::process::id());
    DIR.call_once(|| {
        let _ = std::fs::remove_dir_all(&dir);
        std::env::set_var(vqp_softverbs::ENV_DIR, &dir);
        // Children run in their parent's directory: only the parent removes it.
        if std::env::var_os(ENV_CHILD).is_none() && MADE.set(dir.clone()).is_ok() {
            // Registered before the provider joins the namespace (on its first use,
            // after this), so it runs after the provider's own exit handler has
            // stopped its thread and removed its files.
            // SAFETY: `remove_namespace` is an `extern "C" fn()` that neither unwinds
            // nor calls `exit`.
            unsafe { libc::atexit(remove_namespace) };
        }
    });
    dir
}

/// At exit: removes the namespace directory [`isolate`] made.
extern "C" fn remove_namespace() {
    if let Some(dir) = MADE.get() {
        let _ = std::fs::remove_dir_all(dir);
    }
}

/// A running child.
pub struct Peer(Driver);

impl Deref for Peer {
    type Target = Driver;
    fn deref(&self) -> &Driver {
        &self.0
    }
}

impl DerefMut for Peer {
    fn deref_mut(&mut self) -> &mut Driver {
        &mut self.0
    }
}

impl Peer {
    /// Starts a child running the test binary's `child` test.
    pub fn spawn() -> Peer {
        let dir = isolate();
        Peer(Driver::spawn(ENV_CHILD, STEP, |c| {
            c.env(vqp_softverbs::ENV_DIR, &dir);
        }))
    }

    /// Creates the child's side on `dev`; returns (qpn, lid, addr, rkey).
    pub fn side(&mut self, dev: &str) -> (u32, u16, u64, u32) {
        let l = self.cmd(&format!("side {dev}"));
        let v: Vec<u64> = l[0].split(' ').map(|x| x.parse().unwrap()).collect();
        (v[0] as u32, v[1] as u16, v[2], v[3] as u32)
    }

    /// Stops (`SIGSTOP`) or continues (`SIGCONT`) the child.
    pub fn signal_stop(&mut self, stop: bool) {
        let sig = if stop { libc::SIGSTOP } else { libc::SIGCONT };
        // SAFETY: a plain kill(2) on our own child.
        assert_eq!(unsafe { libc::kill(self.pid() as libc::pid_t, sig) }, 0);
        if stop {
            // kill(2) returns before the threads stop: on a busy machine one of them
            // could still serve a request posted next. Return once every one has.
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
            while !self.stopped() {
                assert!(
                    std::time::Instant::now() < deadline,
                    "the child never stopped"
                );
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
        }
    }

    /// Whether every thread of the child is stopped (state `T` in `/proc`).
    fn stopped(&self) -> bool {
        let tasks = std::fs::read_dir(format!("/proc/{}/task", self.pid()));
        tasks.into_iter().flatten().flatten().all(|t| {
            let stat = std::fs::read_to_string(t.path().join("stat")).unwrap_or_default();
            // The state follows the command name's closing parenthesis.
            let state = stat.rsplit_once(") ").map(|(_, rest)| rest.chars().next());
            matches!(state, Some(Some('T' | 't')))
        })
    }
}

/// Connects `qp` to a peer at (`lid`, `qpn`).
pub fn connect_to(qp: &vqp_host::QueuePair, lid: u16, qpn: u32, o: &Opts, timeout: u8) {
    let mut path = Path::new(1, Address::lid(lid), qpn, 0x100, 0x100);
    path.rnr_retry = o.rnr_retry;
    path.min_rnr_timer = o.min_rnr_timer;
    path.access = o.qp_access;
    path.timeout = timeout;
    path.retry_cnt = 7;
    connect::connect(qp, &path).unwrap();
}

/// One completion as text: `wr_id status opcode byte_len imm`.
pub fn wc_line(wc: &vqp_host::Wc) -> String {
    let r = wc.raw();
    // SAFETY: `imm_data` is a plain u32 in the union.
    let imm = unsafe { r.imm.imm_data };
    format!(
        "{} {} {} {} {}",
        r.wr_id, r.status, r.opcode, r.byte_len, imm
    )
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// A side whose region is registered before its QP is created (so before the process
/// joins the shared namespace, which happens with its first QP), as perftest does.
fn side_mr_first(verbs: &vqp_host::Verbs, dev: &str, o: &Opts) -> Side {
    let ctx = vqp_host::Context::open(verbs, Some(dev)).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let mr = pd.register_buffer(o.buf, o.access).unwrap();
    let cq = ctx.create_cq(o.cqe, None, 0).unwrap();
    let qp = pd.create_qp(&vqp_host::QpInit::rc(&cq, o.cap)).unwrap();
    Side {
        ctx,
        pd,
        channel: None,
        cq,
        qp,
        mr,
    }
}

/// The child's command loop.
pub fn child_main() {
    let verbs = common::verbs();
    let o = Opts::default();
    let mut side: Option<Side> = None;
    let mut extra: Vec<vqp_host::MemoryRegion> = Vec::new();
    let mut windows: Vec<*mut ibv_mw> = Vec::new();
    child::serve(|w| {
        let num = |i: usize| child::num(w, i);
        match w.first().copied() {
            Some(kind @ ("side" | "uc" | "ud" | "mwside")) => {
                // An RC side (`side DEV [mr-first]`), one whose region allows binding
                // memory windows (`mwside DEV`), a UC side (`uc DEV`) or a UD side
                // with Q_Key (`ud DEV QKEY`).
                let s = match kind {
                    "uc" => common::side_of(&verbs, w[1], vqp_host::QpType::Uc),
                    "ud" => common::ud_side(&verbs, w[1], num(2) as u32),
                    "mwside" => {
                        let mo = Opts {
                            access: vqp_host::AccessFlags::from_bits(
                                o.access.bits() | IBV_ACCESS_MW_BIND,
                            ),
                            ..Opts::default()
                        };
                        common::side(&verbs, w[1], &mo)
                    }
                    _ if w.get(2) == Some(&"mr-first") => side_mr_first(&verbs, w[1], &o),
                    _ => common::side(&verbs, w[1], &o),
                };
                let lid = s.ctx.query_port(1).unwrap().lid();
                out(format!(
                    "{} {} {} {}",
                    s.qp.qp_num(),
                    lid,
                    s.mr.addr(),
                    s.mr.rkey()
                ));
                side = Some(s);
            }
            Some("connect_uc") => {
                let s = side.as_ref().unwrap();
                common::connect_typed(&s.qp, num(1) as u16, num(2) as u32, false);
            }
            Some("connect") => {
                let s = side.as_ref().unwrap();
                connect_to(&s.qp, num(1) as u16, num(2) as u32, &o, 14);
            }
            Some("fill") => common::fill(side.as_mut().unwrap(), num(1) as u8),
            Some("recv") => {
                let s = side.as_ref().unwrap();
                let (n, off, len) = (num(1), num(2), num(3));
                for i in 0..n {
                    let mut sge = s.mr.sge((off + i * len) as usize, len as usize).unwrap();
                    let mut wr = common::recv_wr(1000 + i, std::slice::from_mut(&mut sge));
                    common::post_recv(s, &mut wr);
                }
            }
            Some("poll") => {
                let s = side.as_ref().unwrap();
                for wc in common::poll_n(&s.cq, num(1) as usize) {
                    out(format!("wc {}", wc_line(&wc)));
                }
            }
            Some("read") => {
                let s = side.as_ref().unwrap();
                let (off, len) = (num(1) as usize, num(2) as usize);
                out(hex(&common::bytes(s)[off..off + len]));
            }
            Some("fadd") => {
                // n fetch-adds of 1 on (addr, rkey), 8 in flight at a time.
                let s = side.as_ref().unwrap();
                let (n, addr, rkey) = (num(1), num(2), num(3) as u32);
                let mut done = 0;
                let mut posted = 0;
                while done < n {
                    while posted < n && posted - done < 8 {
                        let mut sge = s.mr.sge(8 * (posted % 8) as usize, 8).unwrap();
                        let mut wr = common::send_wr(
                            posted,
                            IBV_WR_ATOMIC_FETCH_AND_ADD,
                            std::slice::from_mut(&mut sge),
                        );
                        wr.wr.atomic = ibv_send_wr_atomic {
                            remote_addr: addr,
                            compare_add: 1,
                            swap: 0,
                            rkey,
                        };
                        common::post(s, &mut wr);
                        posted += 1;
                    }
                    // Yield between polls: several processes share few cores here.
                    let mut buf = [vqp_host::Wc::default(); 8];
                    let deadline = std::time::Instant::now() + STEP;
                    let got = loop {
                        let got = s.cq.poll(&mut buf).unwrap();
                        if !got.is_empty() {
                            break got;
                        }
                        assert!(std::time::Instant::now() < deadline, "fetch-add stalled");
                        std::thread::yield_now();
                    };
                    for wc in got {
                        assert!(wc.is_ok(), "{wc:?}");
                        done += 1;
                    }
                }
            }
            Some("reg") => {
                // One more region of 4 KiB in the side's PD.
                let s = side.as_ref().unwrap();
                let mr = s.pd.register_buffer(4096, o.access).unwrap();
                out(format!("{} {}", mr.addr(), mr.rkey()));
                extra.push(mr);
            }
            Some("dereg") => drop(extra.pop()),
            Some("mw") => {
                // `mw TYPE OFF LEN ACCESS`: a window over the side's region bound
                // through its QP (type 1 by `ibv_bind_mw`, type 2 by a bind work
                // request); answers the bind's status and the window's key.
                let s = side.as_ref().unwrap();
                // SAFETY: a live context; `ops` is filled at open.
                let ops = unsafe { (*s.ctx.as_raw()).ops };
                let ty = num(1) as u32;
                // SAFETY: a live PD.
                let mw = unsafe { ops.alloc_mw.unwrap()(s.pd.as_raw(), ty) };
                assert!(!mw.is_null());
                windows.push(mw);
                let info = ibv_mw_bind_info {
                    mr: s.mr.as_raw(),
                    addr: s.mr.addr() + num(2),
                    length: num(3),
                    mw_access_flags: num(4) as u32,
                };
                // SAFETY: a live window.
                let cur = unsafe { (*mw).rkey };
                if ty == IBV_MW_TYPE_1 {
                    let mut b = ibv_mw_bind {
                        wr_id: 1,
                        send_flags: IBV_SEND_SIGNALED,
                        bind_info: info,
                    };
                    // SAFETY: live QP and window; `b` lives across the call.
                    assert_eq!(
                        unsafe { ops.bind_mw.unwrap()(s.qp.as_raw(), mw, &mut b) },
                        0
                    );
                } else {
                    let mut wr = common::send_wr(1, IBV_WR_BIND_MW, &mut []);
                    wr.bind_mw_tso.bind_mw = ibv_send_wr_bind_mw {
                        mw,
                        rkey: (cur & !0xff) | (cur.wrapping_add(1) & 0xff),
                        bind_info: info,
                    };
                    common::post(s, &mut wr);
                    // SAFETY: as above; the window's key is the bound one from now.
                    unsafe { (*mw).rkey = wr.bind_mw_tso.bind_mw.rkey };
                }
                let wc = common::poll_n(&s.cq, 1);
                // SAFETY: a live window.
                out(format!("{} {}", wc[0].raw().status, unsafe { (*mw).rkey }));
            }
            Some("odp") => {
                // An implicit on-demand region in the side's PD: its rkey.
                let s = side.as_ref().unwrap();
                let access = IBV_ACCESS_ON_DEMAND
                    | IBV_ACCESS_LOCAL_WRITE
                    | IBV_ACCESS_REMOTE_WRITE
                    | IBV_ACCESS_REMOTE_READ;
                // SAFETY: a live PD; an on-demand region needs no memory behind it.
                let mr = unsafe {
                    vqp_softverbs::ibv_reg_mr(
                        s.pd.as_raw(),
                        std::ptr::null_mut(),
                        usize::MAX,
                        access as i32,
                    )
                };
                assert!(!mr.is_null());
                // SAFETY: a live region (kept until the child exits).
                out(unsafe { (*mr).rkey }.to_string());
            }
            Some("odp-guard") => {
                // Two pages under an on-demand region, the second without access:
                // answers the first page's address and the rkey.
                let s = side.as_ref().unwrap();
                // SAFETY: a fresh anonymous mapping, kept (leaked) until the child
                // exits; the region is on-demand, so its protection may change.
                let (base, mr) = unsafe {
                    let p = libc::mmap(
                        std::ptr::null_mut(),
                        8192,
                        libc::PROT_READ | libc::PROT_WRITE,
                        libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                        -1,
                        0,
                    );
                    assert_ne!(p, libc::MAP_FAILED);
                    let access = IBV_ACCESS_ON_DEMAND
                        | IBV_ACCESS_LOCAL_WRITE
                        | IBV_ACCESS_REMOTE_WRITE
                        | IBV_ACCESS_REMOTE_READ;
                    let mr = vqp_softverbs::ibv_reg_mr(s.pd.as_raw(), p, 8192, access as i32);
                    let second = p.cast::<u8>().add(4096).cast();
                    assert_eq!(libc::mprotect(second, 4096, libc::PROT_NONE), 0);
                    (p as u64, mr)
                };
                assert!(!mr.is_null());
                // SAFETY: a live region.
                out(format!("{base} {}", unsafe { (*mr).rkey }));
            }
            Some("inv") => {
                // `inv KEY`: local invalidation through the side's QP; its status.
                let s = side.as_ref().unwrap();
                let mut wr = common::send_wr(2, IBV_WR_LOCAL_INV, &mut []);
                wr.imm.invalidate_rkey = num(1) as u32;
                common::post(s, &mut wr);
                out(common::poll_n(&s.cq, 1)[0].raw().status.to_string());
            }
            Some("events") => {
                // The asynchronous events waiting: type, and whether they name our QP.
                let s = side.as_ref().unwrap();
                for (kind, element) in common::async_events(&s.ctx) {
                    let ours = element == s.qp.as_raw() as usize;
                    out(format!(
                        "event {kind} {}",
                        if ours { "our-qp" } else { "other" }
                    ));
                }
            }
            Some("state") => {
                let s = side.as_ref().unwrap();
                out(format!("state {:?}", s.qp.state().unwrap()));
            }
            Some("pid") => out(std::process::id().to_string()),
            _ => return false,
        }
        true
    });
}
