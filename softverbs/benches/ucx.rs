//! The UCP binding's own cost (`vqp_softverbs::ucx`), beside a plain TCP stream of the
//! same sizes in the same run, over loopback between two threads of this process, each
//! with its own worker (UCX's TCP transport, as softverbs uses it):
//!
//! - 8-byte active message ping-pong, half the round trip, beside an 8-byte TCP
//!   ping-pong (`TCP_NODELAY`);
//! - 1 MiB active messages (rendezvous, fetched into the receiver's buffers, eight in
//!   flight), in bytes per second, beside 1 MiB writes on one TCP stream.
//!
//! The base line that the verbs path over UCX will add to. Skipped with a line when
//! `libucp.so.0` (libucx0) does not load. Figures: docs/benchmarks.md, "The UCP
//! binding".
//!
//! `cargo bench -p vqp-softverbs --bench ucx`

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use vqp_softverbs::ucx::{self, Data, Event, Ucp, Worker};

const PING: u16 = 1;
const PONG: u16 = 2;
const BULK: u16 = 3;
const ROUNDS: usize = 20_000;
const MIB: usize = 1 << 20;
const BULK_MSGS: usize = 512;
const WINDOW: usize = 8;

/// The workers' settings: softverbs' defaults, then `VQP_UCX_BENCH_SETTINGS`
/// (`NAME=VALUE,…`, UCP-level names without `UCX_`, such as `RNDV_THRESH`) to try
/// others. Transport settings (`UCX_TCP_TX_SEG_SIZE`, …) are not UCP-level: UCP 1.13
/// warns about them there and ignores them; give them in the environment.
fn worker() -> Worker {
    let extra = std::env::var("VQP_UCX_BENCH_SETTINGS").unwrap_or_default();
    let mut settings = ucx::DEFAULT_SETTINGS.to_vec();
    settings.extend(extra.split(',').filter_map(|kv| kv.split_once('=')));
    Worker::new(&settings).expect("a UCP worker")
}

/// Runs `b` (a listening worker) on a thread until `stop`: answers every PING with a
/// PONG and fetches every BULK payload into a pooled buffer.
fn server(mut b: Worker, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let pings = Arc::new(Mutex::new(Vec::new()));
        let p = Arc::clone(&pings);
        b.set_handler(PING, move |m| {
            p.lock().unwrap().push(m.from().expect("the sender"));
        })
        .unwrap();
        let pool = Arc::new(Mutex::new(
            (0..WINDOW * 2).map(|_| vec![0u8; MIB]).collect::<Vec<_>>(),
        ));
        let q = Arc::clone(&pool);
        b.set_handler(BULK, move |m| match m.into_data() {
            Data::Rendezvous(r) => {
                let buf = q.lock().unwrap().pop().unwrap_or_else(|| vec![0u8; MIB]);
                r.receive(buf, 0).unwrap();
            }
            Data::Eager(_) => {}
        })
        .unwrap();
        while !stop.load(Ordering::Relaxed) {
            b.progress().unwrap();
            while let Some(e) = b.next_event() {
                match e {
                    Event::ConnRequest(r) => {
                        b.accept(r).unwrap();
                    }
                    Event::Received {
                        buffer: Some(buf), ..
                    } => pool.lock().unwrap().push(buf),
                    _ => {}
                }
            }
            let ps: Vec<_> = pings.lock().unwrap().drain(..).collect();
            for from in ps {
                b.am_send(from, PONG, &[], vec![0u8; 8], 0).unwrap();
            }
        }
    })
}

fn ucx_pingpong(a: &mut Worker, ep: ucx::EpId) -> Duration {
    let pongs = Arc::new(Mutex::new(0usize));
    let p = Arc::clone(&pongs);
    a.set_handler(PONG, move |_| *p.lock().unwrap() += 1)
        .unwrap();
    let mut run = |n: usize| {
        let start = Instant::now();
        for i in 0..n {
            a.am_send(ep, PING, &[], vec![0u8; 8], i as u64).unwrap();
            while *pongs.lock().unwrap() <= i {
                a.progress().unwrap();
            }
            while a.next_event().is_some() {}
        }
        start.elapsed()
    };
    run(1000);
    *pongs.lock().unwrap() = 0;
    run(ROUNDS) / (2 * ROUNDS as u32)
}

fn ucx_bulk(a: &mut Worker, ep: ucx::EpId) -> f64 {
    let data = vec![7u8; MIB];
    let mut in_flight = 0;
    let mut sent = 0;
    let mut done = 0;
    let start = Instant::now();
    while done < BULK_MSGS {
        while in_flight < WINDOW && sent < BULK_MSGS {
            // SAFETY: `data` outlives every send and is never written.
            unsafe { a.am_send_raw(ep, BULK, &[], &[(data.as_ptr(), MIB)], sent as u64) }.unwrap();
            sent += 1;
            in_flight += 1;
        }
        a.progress().unwrap();
        while let Some(e) = a.next_event() {
            if let Event::Sent { result, .. } = e {
                result.unwrap();
                in_flight -= 1;
                done += 1;
            }
        }
    }
    (BULK_MSGS * MIB) as f64 / start.elapsed().as_secs_f64()
}

fn tcp_pingpong() -> Duration {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let t = std::thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        s.set_nodelay(true).unwrap();
        let mut b = [0u8; 8];
        while s.read_exact(&mut b).is_ok() {
            s.write_all(&b).unwrap();
        }
    });
    let mut c = TcpStream::connect(addr).unwrap();
    c.set_nodelay(true).unwrap();
    let mut b = [0u8; 8];
    let mut run = |n: usize| {
        let start = Instant::now();
        for _ in 0..n {
            c.write_all(&b).unwrap();
            c.read_exact(&mut b).unwrap();
        }
        start.elapsed()
    };
    run(1000);
    let d = run(ROUNDS) / (2 * ROUNDS as u32);
    drop(c);
    t.join().unwrap();
    d
}

fn tcp_bulk() -> f64 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let t = std::thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        let mut b = vec![0u8; MIB];
        let mut total = 0;
        while total < BULK_MSGS * MIB {
            let n = s.read(&mut b).unwrap();
            assert!(n > 0);
            total += n;
        }
        s.write_all(&[1]).unwrap();
    });
    let mut c = TcpStream::connect(addr).unwrap();
    let data = vec![7u8; MIB];
    let start = Instant::now();
    for _ in 0..BULK_MSGS {
        c.write_all(&data).unwrap();
    }
    let mut ack = [0u8; 1];
    c.read_exact(&mut ack).unwrap();
    let bw = (BULK_MSGS * MIB) as f64 / start.elapsed().as_secs_f64();
    t.join().unwrap();
    bw
}

fn main() {
    if let Err(e) = Ucp::get() {
        println!("skipped the ucx bench: {e}");
        return;
    }
    let mut b = worker();
    let l = b.listen(SocketAddr::from(([127, 0, 0, 1], 0))).unwrap();
    let addr = b.listener_addr(l).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let srv = server(b, Arc::clone(&stop));
    let mut a = worker();
    let ep = a.connect(addr).unwrap();
    let ucx_lat = ucx_pingpong(&mut a, ep);
    let tcp_lat = tcp_pingpong();
    let ucx_bw = ucx_bulk(&mut a, ep);
    let tcp_bw = tcp_bulk();
    stop.store(true, Ordering::Relaxed);
    srv.join().unwrap();
    println!(
        "UCP binding over loopback (UCX {}), same run:",
        Ucp::get().unwrap().version()
    );
    println!("| workload | UCP active messages | TCP | UCP / TCP |");
    println!("|---|---:|---:|---:|");
    println!(
        "| 8 B ping-pong, half round trip | {:.1} µs | {:.1} µs | {:.2} |",
        ucx_lat.as_secs_f64() * 1e6,
        tcp_lat.as_secs_f64() * 1e6,
        ucx_lat.as_secs_f64() / tcp_lat.as_secs_f64()
    );
    println!(
        "| 1 MiB messages, {WINDOW} in flight | {:.2} GB/s | {:.2} GB/s | {:.2} |",
        ucx_bw / 1e9,
        tcp_bw / 1e9,
        ucx_bw / tcp_bw
    );
}
