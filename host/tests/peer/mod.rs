//! A hand-driven TCP peer on 127.0.0.1 for the exchange and deadline tests.

use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::sync::mpsc::Receiver;
use std::thread;
use std::time::Duration;

/// Short enough that no test waits long, long enough for a loaded machine to send a
/// few bytes inside it.
pub const SHORT: Duration = Duration::from_millis(300);

/// A listener on a free loopback port.
pub fn listener() -> TcpListener {
    TcpListener::bind("127.0.0.1:0").unwrap()
}

/// A raw peer that accepts, then runs `act` on the stream; returns the other end and
/// the peer's thread.
pub fn raw_peer<T: Send + 'static>(
    act: impl FnOnce(TcpStream) -> T + Send + 'static,
) -> (TcpStream, thread::JoinHandle<T>) {
    let l = listener();
    let addr = l.local_addr().unwrap();
    let h = thread::spawn(move || {
        let (s, _) = l.accept().unwrap();
        act(s)
    });
    (TcpStream::connect(addr).unwrap(), h)
}

/// Sends `bytes` one at a time, `every` apart, until they run out, the connection
/// fails or `stop` says so; returns how many it sent.
pub fn trickle(s: &mut TcpStream, bytes: &[u8], every: Duration, stop: &Receiver<()>) -> usize {
    for (i, b) in bytes.iter().enumerate() {
        if stop.try_recv().is_ok() {
            return i;
        }
        thread::sleep(every);
        if s.write_all(std::slice::from_ref(b)).is_err() {
            return i;
        }
    }
    bytes.len()
}
