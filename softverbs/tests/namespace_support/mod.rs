//! A rig for namespace tests: every process runs in a child (the test binary re-run as
//! its `child` test, with `VQP_NS_CHILD` set, driven through `child`), in the namespace
//! directory and with the device count the test names. This file holds the child's
//! commands.
#![allow(dead_code)]

#[path = "../child/mod.rs"]
pub mod child;

use std::ops::{Deref, DerefMut};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use child::{out, Driver};
use vqp_host::sys::*;

use crate::common::{self, Opts, Side};

/// Set in a child's environment.
pub const ENV_CHILD: &str = "VQP_NS_CHILD";
/// How long one child command may take.
pub const STEP: Duration = Duration::from_secs(30);

/// A fresh directory for one test, removed when dropped; the namespace is made inside
/// it by the first child unless the test makes it.
pub struct Scratch(PathBuf);

impl Scratch {
    /// A path inside the directory.
    pub fn join(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The scratch directory of test `test` (emptied first if a previous run left it).
pub fn scratch(test: &str) -> Scratch {
    let d = std::env::temp_dir().join(format!("vqp-ns-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    Scratch(d)
}

/// The names in `dir`, sorted.
pub fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    v.sort();
    v
}

/// The registry file in `dir` (whatever its name's version suffix).
pub fn registry(dir: &Path) -> PathBuf {
    let name = names(dir)
        .into_iter()
        .find(|n| n.starts_with("registry"))
        .unwrap_or_else(|| panic!("no registry in {}: {:?}", dir.display(), names(dir)));
    dir.join(name)
}

/// Whether this process runs as root (tests of another user's files need it).
pub fn is_root() -> bool {
    // SAFETY: no arguments, cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// A running child.
pub struct Proc(Driver);

impl Deref for Proc {
    type Target = Driver;
    fn deref(&self) -> &Driver {
        &self.0
    }
}

impl DerefMut for Proc {
    fn deref_mut(&mut self) -> &mut Driver {
        &mut self.0
    }
}

impl Proc {
    /// Starts a child in namespace `dir` with `devices` devices.
    pub fn spawn(dir: &Path, devices: usize) -> Proc {
        Proc(Driver::spawn(ENV_CHILD, STEP, |c| {
            c.env(vqp_softverbs::ENV_DIR, dir)
                .env("VQP_SOFT_DEVICES", devices.to_string())
                .stderr(Stdio::piped());
        }))
    }

    /// Tries to create an RC QP on `dev`: `Ok(qpn)` or `Err(errno)`, and how long the
    /// call took.
    pub fn create(&mut self, dev: &str) -> (Result<u32, i32>, Duration) {
        let l = self.one(&format!("create {dev}"));
        let w: Vec<&str> = l.split(' ').collect();
        let took = Duration::from_micros(w[2].parse().unwrap());
        let r = match w[0] {
            "ok" => Ok(w[1].parse().unwrap()),
            _ => Err(w[1].parse().unwrap()),
        };
        (r, took)
    }

    /// Ends the child normally (its exit handlers run) and returns its stderr.
    pub fn exit(self) -> String {
        self.0.exit()
    }

    /// Kills the child with `SIGKILL` (no exit handler runs) and reaps it.
    pub fn kill(mut self) {
        self.0.kill();
    }
}

/// The child's command loop.
pub fn child_main() {
    let verbs = common::verbs();
    let o = Opts::default();
    let mut side: Option<Side> = None;
    let mut kept: Vec<Side> = Vec::new();
    child::serve(|w| {
        let num = |i: usize| child::num(w, i);
        match w.first().copied() {
            Some("create") => {
                // A context, PD, CQ and region stay; the QP is tried.
                let ctx = vqp_host::Context::open(&verbs, Some(w[1])).unwrap();
                let pd = ctx.alloc_pd().unwrap();
                let mr = pd.register_buffer(4096, o.access).unwrap();
                let cq = ctx.create_cq(16, None, 0).unwrap();
                let t = Instant::now();
                let made = pd.create_qp(&vqp_host::QpInit::rc(&cq, o.cap));
                let us = t.elapsed().as_micros();
                match made {
                    Ok(qp) => {
                        out(format!("ok {} {us}", qp.qp_num()));
                        kept.push(Side {
                            ctx,
                            pd,
                            channel: None,
                            cq,
                            qp,
                            mr,
                        });
                    }
                    Err(e) => out(format!("err {} {us}", e.raw_os_error().unwrap_or(-1))),
                }
            }
            Some("hold") => {
                let n = vqp_softverbs::hold_qp_numbers(num(1) as usize);
                out(format!("{}", n.map_or(-1, |n| n as i64)));
            }
            Some("side") => {
                let s = common::side(&verbs, w[1], &o);
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
            Some("connect") => {
                let s = side.as_ref().unwrap();
                let mut path = vqp_host::connect::Path::new(
                    1,
                    vqp_host::connect::Address::lid(num(1) as u16),
                    num(2) as u32,
                    0x100,
                    0x100,
                );
                path.access = o.qp_access;
                vqp_host::connect::connect(&s.qp, &path).unwrap();
            }
            Some("fill") => common::fill(side.as_mut().unwrap(), num(1) as u8),
            Some("write") => {
                // WRITE our [OFF, OFF+LEN) to (ADDR, RKEY); answers the status.
                let s = side.as_ref().unwrap();
                let mut sge = s.mr.sge(num(1) as usize, num(2) as usize).unwrap();
                let mut wr = common::send_wr(1, IBV_WR_RDMA_WRITE, std::slice::from_mut(&mut sge));
                wr.wr.rdma = ibv_send_wr_rdma {
                    remote_addr: num(3),
                    rkey: num(4) as u32,
                };
                common::post(s, &mut wr);
                let wc = common::poll_n(&s.cq, 1);
                out(format!("{:?}", wc[0].status()));
            }
            Some("read") => {
                let s = side.as_ref().unwrap();
                let (off, len) = (num(1) as usize, num(2) as usize);
                let b = &common::bytes(s)[off..off + len];
                out(b.iter().map(|x| format!("{x:02x}")).collect::<String>());
            }
            _ => return false,
        }
        true
    });
}
