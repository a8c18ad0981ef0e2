//! Socket addresses to and from the C `sockaddr_storage` UCP takes and gives.

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};

/// `addr` as a `sockaddr_storage` and the length of the part in use.
pub(crate) fn to_storage(addr: SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: all-zero bytes are a valid `sockaddr_storage`.
    let mut storage: libc::sockaddr_storage = unsafe { core::mem::zeroed() };
    let len = match addr {
        SocketAddr::V4(a) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(a.ip().octets()),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: a `sockaddr_in` fits in a `sockaddr_storage`, which is aligned for it.
            unsafe { core::ptr::write((&mut storage as *mut libc::sockaddr_storage).cast(), sin) };
            core::mem::size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(a) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: a.flowinfo(),
                sin6_addr: libc::in6_addr {
                    s6_addr: a.ip().octets(),
                },
                sin6_scope_id: a.scope_id(),
            };
            // SAFETY: a `sockaddr_in6` fits in a `sockaddr_storage`, which is aligned for it.
            unsafe { core::ptr::write((&mut storage as *mut libc::sockaddr_storage).cast(), sin6) };
            core::mem::size_of::<libc::sockaddr_in6>()
        }
    };
    (storage, len as libc::socklen_t)
}

/// The address in `storage`, if it is IPv4 or IPv6.
pub(crate) fn from_storage(storage: &libc::sockaddr_storage) -> Option<SocketAddr> {
    let base = (storage as *const libc::sockaddr_storage).cast::<u8>();
    match storage.ss_family as i32 {
        libc::AF_INET => {
            // SAFETY: the family says it holds a `sockaddr_in`, which fits and is aligned.
            let sin = unsafe { &*base.cast::<libc::sockaddr_in>() };
            Some(SocketAddr::V4(SocketAddrV4::new(
                Ipv4Addr::from(sin.sin_addr.s_addr.to_ne_bytes()),
                u16::from_be(sin.sin_port),
            )))
        }
        libc::AF_INET6 => {
            // SAFETY: the family says it holds a `sockaddr_in6`, which fits and is aligned.
            let sin6 = unsafe { &*base.cast::<libc::sockaddr_in6>() };
            Some(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(sin6.sin6_addr.s6_addr),
                u16::from_be(sin6.sin6_port),
                sin6.sin6_flowinfo,
                sin6.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_round_trip() {
        for a in ["192.0.2.7:4791", "[2001:db8::1]:18515", "0.0.0.0:0"] {
            let a: SocketAddr = a.parse().unwrap();
            let (s, len) = to_storage(a);
            assert!(len as usize <= core::mem::size_of::<libc::sockaddr_storage>());
            assert_eq!(from_storage(&s), Some(a));
        }
    }
}
