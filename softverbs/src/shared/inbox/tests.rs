//! The ring over a real file mapping: order, a full ring, payloads, producers at once.

use super::*;

fn file(name: &str) -> (std::path::PathBuf, File) {
    let p = std::env::temp_dir().join(format!("vqp-inbox-{name}-{}", std::process::id()));
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&p)
        .unwrap();
    f.set_len(FILE_SIZE as u64).unwrap();
    (p, f)
}

#[test]
fn records_round_trip_in_order_and_a_full_ring_says_so() {
    let (p, f) = file("order");
    let own = Inbox::map(&f, true, 0).unwrap();
    let peer = Inbox::map(&f, false, 1).unwrap();
    assert!(!own.maybe_ready());
    let mut r = Record::new(Kind::Request);
    r.code = 4;
    r.len = 1 << 40;
    let mut pl = [0u8; PAYLOAD];
    assert!(r.push_iov(&mut pl, 0x1000, 64));
    assert!(r.push_iov(&mut pl, 0x2000, 32));
    let n = r.payload_len;
    for i in 0..SLOTS {
        r.psn = i as u32;
        peer.push(&r, &pl[..n]).unwrap();
    }
    assert_eq!(peer.push(&r, &pl[..n]), Err(PushError::Full));
    let mut got_pl = [0u8; PAYLOAD];
    for i in 0..SLOTS {
        let got = own.pop(&mut got_pl, |_| false).unwrap();
        assert_eq!(got.psn, i as u32);
        assert_eq!(got.len, 1 << 40);
        assert_eq!(got.payload_len, 32);
        assert_eq!(iov(&got_pl[..got.payload_len], 1), (0x2000, 32));
        assert_eq!(iov(&got_pl[..got.payload_len], 2), (0, 0));
    }
    assert!(own.pop(&mut got_pl, |_| false).is_none());
    r.flags = F_INLINE;
    r.n_iov = 0;
    peer.push(&r, b"abc").unwrap();
    let got = own.pop(&mut got_pl, |_| false).unwrap();
    assert_eq!(got.payload_len, 3);
    assert_eq!(&got_pl[..3], b"abc");
    std::fs::remove_file(p).unwrap();
}

#[test]
fn many_producers_lose_nothing() {
    let (p, f) = file("mpmc");
    let own = Inbox::map(&f, true, 0).unwrap();
    let peers: Vec<Inbox> = (0..3).map(|_| Inbox::map(&f, false, 1).unwrap()).collect();
    const N: u32 = 5000;
    let mut seen = [0u32; 3];
    std::thread::scope(|s| {
        for (t, ib) in peers.iter().enumerate() {
            s.spawn(move || {
                let mut r = Record::new(Kind::Response);
                r.src_qpn = t as u32;
                for i in 0..N {
                    r.psn = i;
                    while ib.push(&r, &[]).is_err() {
                        std::thread::yield_now();
                    }
                }
            });
        }
        let mut got = 0;
        let mut pl = [0u8; PAYLOAD];
        while got < 3 * N {
            match own.pop(&mut pl, |_| false) {
                Some(r) => {
                    let t = r.src_qpn as usize;
                    assert_eq!(r.psn, seen[t], "per-producer order");
                    seen[t] += 1;
                    got += 1;
                }
                None => own.wait(Some(Duration::from_millis(1)), || false),
            }
        }
    });
    std::fs::remove_file(p).unwrap();
}

/// A producer stalled between claiming a slot and publishing it: the owner skips the
/// slot after `STUCK` but leaves it to its claimant, so another producer finds the ring
/// full there rather than writing where the stalled one still writes; when the stalled
/// one resumes it learns `Lost` and hands the slot back. A claimant found dead has its
/// slot freed at once.
#[test]
fn a_stalled_producer_keeps_its_slot_and_a_dead_one_loses_it() {
    let (p, f) = file("stall");
    let own = Inbox::map(&f, true, 0).unwrap();
    let (stalled, later, dying) = (11, 12, 13);
    let a = Inbox::map(&f, false, stalled).unwrap();
    let b = Inbox::map(&f, false, later).unwrap();
    let dead = |id| id == dying;
    let mut pl = [0u8; PAYLOAD];
    let pos = ring::take_slot(&a, stalled).unwrap();
    assert!(own.pop(&mut pl, dead).is_none(), "claimed, not published");
    std::thread::sleep(STUCK + Duration::from_millis(50));
    assert!(own.pop(&mut pl, dead).is_none(), "skipped");
    let mut r = Record::new(Kind::Response);
    for i in 1..SLOTS {
        r.psn = i as u32;
        b.push(&r, &[i as u8; 8]).unwrap();
    }
    assert_eq!(
        b.push(&r, &[0xee; 8]),
        Err(PushError::Full),
        "the stalled producer's slot is not reused"
    );
    r.psn = 0;
    assert_eq!(
        ring::put(&a, stalled, pos, &r, &[0xaa; 8]),
        Err(PushError::Lost)
    );
    r.psn = SLOTS as u32;
    b.push(&r, &[0xbb; 8]).unwrap();
    for i in 1..=SLOTS {
        let got = own.pop(&mut pl, dead).unwrap();
        assert_eq!(got.psn, i as u32);
        let want = if i == SLOTS { 0xbb } else { i as u8 };
        assert_eq!(&pl[..got.payload_len], &[want; 8], "record {i} intact");
    }
    // A claimant that dies: its slot is freed once it is found stuck.
    let c = Inbox::map(&f, false, dying).unwrap();
    ring::take_slot(&c, dying).unwrap();
    assert!(own.pop(&mut pl, dead).is_none());
    std::thread::sleep(STUCK + Duration::from_millis(50));
    assert!(own.pop(&mut pl, dead).is_none());
    for i in 0..SLOTS {
        r.psn = i as u32;
        b.push(&r, &[]).unwrap();
    }
    for i in 0..SLOTS {
        assert_eq!(own.pop(&mut pl, dead).unwrap().psn, i as u32);
    }
    std::fs::remove_file(p).unwrap();
}
