//! Addresses: C `sockaddr`s to and from Rust's, which addresses this machine answers
//! for, and the listener socket names a destination is looked up by.
//!
//! **Addressing**: every address of this machine — loopback (`127.0.0.0/8`, `::1`),
//! and each address of its interfaces (`getifaddrs`, in the caller's network
//! namespace) — resolves at once; any other address is not answered (ADDR_ERROR,
//! -ETIMEDOUT, after the caller's timeout). Which device an address resolves to is
//! [`crate::verbs::place`]'s:
//! - an address of an interface a soft device is bound to (`VQP_SOFT_NETDEV`,
//!   `softverbs run --netdev`) is that device's, port 1, and its GID is the address's
//!   RoCE v2 GID (`::ffff:a.b.c.d`, or the IPv6 address), as the kernel's rdma_cm
//!   binds an id to the device of the netdev that owns the address and takes that
//!   address's GID (`rdma_ip2gid`); the connection's QPs are made on that device and
//!   their address vectors name that GID;
//! - loopback, and the addresses of interfaces no device is bound to, are soft device
//!   0's (the first device that opens), port 1, by its GID index 0 — as the kernel
//!   binds a loopback id to the first active port by its GID 0 (`cma_bind_loopback`);
//!   with no device bound, every address is device 0's.
//!
//! An active id with no source address takes the destination's own address as its
//! source (so its device is the destination's); with one (`rdma_resolve_addr`'s `src`,
//! `rping -I`) the source's device.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};

/// Reads a C socket address (`AF_INET` or `AF_INET6`).
///
/// # Safety
/// `sa` is null or points to a socket address as long as its family says.
pub unsafe fn from_c(sa: *const libc::sockaddr) -> Result<SocketAddr, i32> {
    if sa.is_null() {
        return Err(libc::EINVAL);
    }
    // SAFETY: `sa` points to at least a `sockaddr` (the caller's contract).
    let family = i32::from(unsafe { (*sa).sa_family });
    match family {
        libc::AF_INET => {
            // SAFETY: an AF_INET address is a `sockaddr_in`; read unaligned in case the
            // caller's buffer is not.
            let sin = unsafe { sa.cast::<libc::sockaddr_in>().read_unaligned() };
            Ok(SocketAddr::V4(SocketAddrV4::new(
                Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr)),
                u16::from_be(sin.sin_port),
            )))
        }
        libc::AF_INET6 => {
            // SAFETY: an AF_INET6 address is a `sockaddr_in6`.
            let sin6 = unsafe { sa.cast::<libc::sockaddr_in6>().read_unaligned() };
            Ok(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(sin6.sin6_addr.s6_addr),
                u16::from_be(sin6.sin6_port),
                sin6.sin6_flowinfo,
                sin6.sin6_scope_id,
            )))
        }
        _ => Err(libc::EAFNOSUPPORT),
    }
}

/// `a` as a `sockaddr_storage` (zero past the address).
pub fn to_storage(a: &SocketAddr) -> libc::sockaddr_storage {
    // SAFETY: all-zero is a valid sockaddr_storage.
    let mut st: libc::sockaddr_storage = unsafe { core::mem::zeroed() };
    match a {
        SocketAddr::V4(v4) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: v4.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from(*v4.ip()).to_be(),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: a sockaddr_in fits in a sockaddr_storage, which is aligned for it.
            unsafe {
                (&mut st as *mut libc::sockaddr_storage)
                    .cast::<libc::sockaddr_in>()
                    .write(sin)
            };
        }
        SocketAddr::V6(v6) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: v6.port().to_be(),
                sin6_flowinfo: v6.flowinfo(),
                sin6_addr: libc::in6_addr {
                    s6_addr: v6.ip().octets(),
                },
                sin6_scope_id: v6.scope_id(),
            };
            // SAFETY: as above, for sockaddr_in6.
            unsafe {
                (&mut st as *mut libc::sockaddr_storage)
                    .cast::<libc::sockaddr_in6>()
                    .write(sin6)
            };
        }
    }
    st
}

/// The length of `a` as a C address.
pub fn c_len(a: &SocketAddr) -> libc::socklen_t {
    (match a {
        SocketAddr::V4(_) => core::mem::size_of::<libc::sockaddr_in>(),
        SocketAddr::V6(_) => core::mem::size_of::<libc::sockaddr_in6>(),
    }) as libc::socklen_t
}

/// The addresses of this machine's interfaces.
fn interface_addresses() -> Vec<IpAddr> {
    let mut out = Vec::new();
    let mut ifap: *mut libc::ifaddrs = core::ptr::null_mut();
    // SAFETY: `ifap` is a valid out-pointer; the list is freed below.
    if unsafe { libc::getifaddrs(&mut ifap) } != 0 {
        return out;
    }
    let mut p = ifap;
    while !p.is_null() {
        // SAFETY: `p` is a node of the list getifaddrs returned.
        let ifa = unsafe { &*p };
        if !ifa.ifa_addr.is_null() {
            // SAFETY: `ifa_addr` points to an address of its family's length.
            if let Ok(a) = unsafe { from_c(ifa.ifa_addr) } {
                out.push(a.ip());
            }
        }
        p = ifa.ifa_next;
    }
    // SAFETY: `ifap` came from getifaddrs.
    unsafe { libc::freeifaddrs(ifap) };
    out
}

/// Whether `ip` is an address of this machine (see the module documentation). An
/// IPv4-mapped IPv6 address counts as its IPv4 address.
pub fn is_local(ip: IpAddr) -> bool {
    let ip = match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    };
    ip.is_loopback() || interface_addresses().contains(&ip)
}

/// The name a listening id's socket is found by for `(ps, addr)`:
/// `l-<ps>-<4|6>-<address>-<port>`, the address in hex (all zeros for a wildcard).
pub fn listener_name(ps: u32, addr: &SocketAddr) -> String {
    socket_name('l', ps, addr)
}

/// The name of the socket an id bound to `(ps, addr)` holds, which reserves the port:
/// as [`listener_name`] with `b-`. `rdma_listen` adds the listener name beside it (a
/// second link to the same socket), so that a REQ finds only ids that listen, and a
/// program started once the listener name exists is not refused.
pub fn bound_name(ps: u32, addr: &SocketAddr) -> String {
    socket_name('b', ps, addr)
}

fn socket_name(kind: char, ps: u32, addr: &SocketAddr) -> String {
    let (fam, hex) = match addr.ip() {
        IpAddr::V4(v4) => ('4', format!("{:08x}", u32::from(v4))),
        IpAddr::V6(v6) => ('6', format!("{:032x}", u128::from(v6))),
    };
    format!("{kind}-{ps:x}-{fam}-{hex}-{}", addr.port())
}

/// The listener names a REQ to `dst` is offered to, in order: the exact address, the
/// wildcard of its family, and for IPv4 (or IPv4-mapped) the IPv6 wildcard — as TCP
/// finds a listener.
pub fn candidates(ps: u32, dst: &SocketAddr) -> Vec<String> {
    let port = dst.port();
    let ip = match dst.ip() {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(dst.ip(), IpAddr::V4),
        v4 => v4,
    };
    let mut out = vec![listener_name(ps, &SocketAddr::new(ip, port))];
    match ip {
        IpAddr::V4(_) => {
            out.push(listener_name(
                ps,
                &SocketAddr::new(Ipv4Addr::UNSPECIFIED.into(), port),
            ));
            out.push(listener_name(
                ps,
                &SocketAddr::new(Ipv6Addr::UNSPECIFIED.into(), port),
            ));
            // A v6 listener bound to the v4-mapped form of the address.
            if let IpAddr::V4(v4) = ip {
                out.push(listener_name(
                    ps,
                    &SocketAddr::new(v4.to_ipv6_mapped().into(), port),
                ));
            }
        }
        IpAddr::V6(_) => {
            out.push(listener_name(
                ps,
                &SocketAddr::new(Ipv6Addr::UNSPECIFIED.into(), port),
            ));
        }
    }
    out
}

/// An ephemeral port, from Linux's default range (32768–60999).
pub fn ephemeral_port() -> u16 {
    let mut b = [0u8; 2];
    // SAFETY: `b` is writable for 2 bytes.
    let n = unsafe { libc::getrandom(b.as_mut_ptr().cast(), 2, 0) };
    let r = if n == 2 {
        u16::from_ne_bytes(b)
    } else {
        (std::process::id() as u16) ^ (std::time::Instant::now().elapsed().subsec_nanos() as u16)
    };
    32768 + r % (60999 - 32768 + 1)
}

/// A random 24-bit PSN, as the kernel's rdma_cm picks one for each connection.
pub fn random_psn() -> u32 {
    let mut b = [0u8; 4];
    // SAFETY: `b` is writable for 4 bytes.
    unsafe { libc::getrandom(b.as_mut_ptr().cast(), 4, 0) };
    u32::from_ne_bytes(b) & 0x00ff_ffff
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_v4_destination_is_offered_to_exact_then_wildcards() {
        let c = candidates(0x106, &"127.0.0.1:7174".parse().unwrap());
        assert_eq!(c[0], "l-106-4-7f000001-7174");
        assert_eq!(c[1], "l-106-4-00000000-7174");
        assert_eq!(c[2], format!("l-106-6-{}-7174", "0".repeat(32)));
        let m = candidates(0x106, &"[::ffff:127.0.0.1]:9".parse().unwrap());
        assert_eq!(m[0], "l-106-4-7f000001-9");
    }

    #[test]
    fn loopback_and_interfaces_are_local_others_are_not() {
        assert!(is_local("127.0.0.1".parse().unwrap()));
        assert!(is_local("127.1.2.3".parse().unwrap()));
        assert!(is_local("::1".parse().unwrap()));
        assert!(!is_local("192.0.2.77".parse().unwrap()));
        assert!(!is_local("2001:db8::77".parse().unwrap()));
    }

    #[test]
    fn c_addresses_round_trip() {
        for s in ["10.1.2.3:4791", "[fe80::1%2]:65535"] {
            let a: SocketAddr = s.parse().unwrap();
            let st = to_storage(&a);
            // SAFETY: `st` holds the address just written.
            let back = unsafe { from_c((&st as *const libc::sockaddr_storage).cast()) };
            assert_eq!(back, Ok(a));
        }
        // SAFETY: null is refused before anything is read.
        let null = unsafe { from_c(core::ptr::null()) };
        assert_eq!(null, Err(libc::EINVAL));
    }
}
