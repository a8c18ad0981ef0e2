//! Connection set-up of a 4-QP virtual QP (DQPLB), two threads of one process on
//! in-process softverbs (soft0 → soft1), the two ways vqp-host offers, interleaved in
//! the same run: the endpoint-card exchange over TCP (`exchange::serve_on`/`connect`,
//! then `barrier`), and the RDMA connection manager (`cm::connect`/`CmListener`,
//! vqp-rdmacm: one CM connection per QP). Each iteration times, on the client, from
//! creating its endpoint to both sides being connected (a `Barrier` after the server's
//! last step). Prints the median and the 90th percentile of each.
//!
//! `cargo build --release -p vqp-softverbs -p vqp-rdmacm && cargo bench --bench connect`
//! (vqp-rdmacm's library is loaded from beside this binary's directory).

use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use vqp::core::split::SplitPolicy;
use vqp::core::{Config, Mode};
use vqp::host::cm::{self, CmListener};
use vqp::host::loader::cm::RdmaCm;
use vqp::host::{exchange, Context, Endpoint, ProtectionDomain, Settings, Verbs};

type Ep = Endpoint<4, 64, 256, 512, 1, 16>;

const ITERS: usize = 30;
const T: Duration = Duration::from_secs(10);

fn built(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let lib = exe.parent().and_then(Path::parent).unwrap().join(format!(
        "{}{name}{}",
        std::env::consts::DLL_PREFIX,
        std::env::consts::DLL_SUFFIX
    ));
    assert!(
        lib.is_file(),
        "{} is missing: cargo build --release -p vqp-softverbs -p vqp-rdmacm",
        lib.display()
    );
    lib
}

fn settings() -> Settings {
    Settings::new(
        Config {
            split: SplitPolicy::new(64 << 10),
            max_outstanding: 64,
            recv_depth: 64,
            ..Config::new(Mode::Dqplb)
        },
        4,
    )
}

fn pd(verbs: &Verbs, dev: &str) -> ProtectionDomain {
    Context::open(verbs, Some(dev))
        .expect("softverbs device")
        .alloc_pd()
        .expect("pd")
}

#[derive(Clone, Copy, PartialEq)]
enum Way {
    Card,
    Cm,
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        println!("connect: bench");
        return;
    }
    let test = std::env::args().any(|a| a == "--test");
    let dir = std::env::temp_dir().join(format!("vqp-bench-connect-{}", std::process::id()));
    std::env::set_var("VQP_SOFT_DIR", &dir);
    std::env::set_var("VQP_IBVERBS_PATH", built("vqp_softverbs"));
    // SAFETY: vqp-rdmacm's library, a librdmacm.
    let rdmacm = unsafe { RdmaCm::load_from(&built("vqp_rdmacm")) }.expect("vqp-rdmacm");
    // SAFETY: softverbs' table implements the libibverbs ABI.
    let verbs = unsafe { Verbs::from_table(vqp_softverbs::verbs_table()) };
    let tcp = TcpListener::bind("127.0.0.1:0").unwrap();
    let tcp_addr = tcp.local_addr().unwrap();
    let cm_addr: SocketAddr = format!("127.0.0.1:{}", tcp_addr.port()).parse().unwrap();
    let mut listener = CmListener::bind(&rdmacm, cm_addr).expect("CM listener");
    let iters = if test { 2 } else { ITERS };
    let ways: Vec<Way> = (0..2 * iters)
        .map(|i| if i % 2 == 0 { Way::Card } else { Way::Cm })
        .collect();
    let done = Arc::new(Barrier::new(2));
    let (v, d, w) = (verbs.clone(), done.clone(), ways.clone());
    let server = std::thread::spawn(move || {
        let pd = pd(&v, "soft1");
        for way in w {
            let ep = Ep::create(&pd, &settings(), None).expect("endpoint");
            let mine = ep.card();
            match way {
                Way::Card => {
                    let (peer, mut s) = exchange::serve_on(&tcp, &mine).expect("serve");
                    let _c = ep.connect(&peer).expect("connect");
                    exchange::barrier(&mut s).expect("barrier");
                    d.wait();
                }
                Way::Cm => {
                    let peer = listener.request(&mine, T).expect("request");
                    let _c = ep.connect(&peer).expect("connect");
                    let _cm = listener.accept(&mine, T).expect("accept");
                    d.wait();
                }
            }
        }
    });
    let pd = pd(&verbs, "soft0");
    let (mut card, mut cmt) = (Vec::new(), Vec::new());
    for way in ways {
        let start = Instant::now();
        let ep = Ep::create(&pd, &settings(), None).expect("endpoint");
        let mine = ep.card();
        match way {
            Way::Card => {
                let (peer, mut s) = exchange::connect(tcp_addr, &mine).expect("connect");
                let _c = ep.connect(&peer).expect("connect");
                exchange::barrier(&mut s).expect("barrier");
                done.wait();
                card.push(start.elapsed());
            }
            Way::Cm => {
                let (peer, dialled) = cm::connect(&rdmacm, cm_addr, &mine, T).expect("cm");
                let _c = ep.connect(&peer).expect("connect");
                let _cm = dialled.establish().expect("establish");
                done.wait();
                cmt.push(start.elapsed());
            }
        }
    }
    server.join().unwrap();
    let show = |name: &str, v: &mut Vec<Duration>| {
        v.sort();
        let at = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize];
        println!(
            "connect/{name:<24} {} runs: median {:>8.2} ms, p90 {:>8.2} ms",
            v.len(),
            at(0.5).as_secs_f64() * 1e3,
            at(0.9).as_secs_f64() * 1e3
        );
    };
    show("card exchange (TCP)", &mut card);
    show("RDMA-CM (4 connections)", &mut cmt);
    let _ = std::fs::remove_dir_all(dir);
}
