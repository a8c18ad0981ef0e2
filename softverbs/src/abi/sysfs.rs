//! rdma-core's sysfs helpers, `ibv_get_sysfs_path` and `ibv_read_sysfs_file`, which
//! programs (rdma-core's `ibv_devinfo` reads `board_id`) call with a device's
//! `ibdev_path`.
//!
//! A `soft` device has no directory under `/sys`: its `ibdev_path`
//! (`/sys/class/infiniband/soft<N>`) is answered from the provider with the attribute
//! files a ConnectX device has there (`node_guid`, `board_id`, `ports/1/state`,
//! `ports/1/gids/0`, …), formatted as the kernel formats them. Any other path is read from
//! the file system, as rdma-core does.

use core::ffi::{c_char, c_int, CStr};
use std::ffi::CString;
use std::io::Read as _;
use std::sync::OnceLock;

use super::set_errno;
use crate::device::Device;
use crate::provider;

/// The `ibdev_path` of device `index`, as `ibv_device` carries it.
pub(crate) fn ibdev_path(name: &str) -> String {
    format!("/sys/class/infiniband/{name}")
}

/// `xxxx:xxxx:xxxx:xxxx`, the kernel's format of a GUID.
fn guid_str(guid: u64) -> String {
    format!(
        "{:04x}:{:04x}:{:04x}:{:04x}",
        guid >> 48,
        (guid >> 32) & 0xffff,
        (guid >> 16) & 0xffff,
        guid & 0xffff
    )
}

/// A GID as the kernel's sysfs shows it: eight groups of four hex digits.
fn gid_str(gid: &[u8; 16]) -> String {
    gid.chunks(2)
        .map(|w| format!("{:02x}{:02x}", w[0], w[1]))
        .collect::<Vec<_>>()
        .join(":")
}

/// The content (without the trailing newline) of attribute `file` of a soft device, as
/// the kernel's `/sys/class/infiniband/<dev>/` would show it; `None` for a file it does
/// not have. A RoCE port shows link layer `Ethernet`, LID 0, its GIDs with type
/// `RoCE v2` and their interface (`gid_attrs/ndevs/N`), as the kernel shows an
/// `rdma_rxe` port.
fn soft_attribute(d: &Device, file: &str) -> Option<String> {
    let up = d.is_up();
    let file = file.trim_start_matches('/');
    let roce = d.is_roce();
    let gid_at = |prefix: &str| -> Option<usize> {
        let i: usize = file.strip_prefix(prefix)?.parse().ok()?;
        (i < d.gids().len()).then_some(i)
    };
    if let Some(i) = gid_at("ports/1/gids/") {
        return Some(gid_str(&d.gids()[i]));
    }
    if gid_at("ports/1/gid_attrs/types/").is_some() {
        return Some(if roce { "RoCE v2" } else { "IB/RoCE v1" }.into());
    }
    if gid_at("ports/1/gid_attrs/ndevs/").is_some() {
        return d.roce().map(|n| n.name.clone());
    }
    Some(match file {
        "node_type" => "1: CA".into(),
        "node_guid" | "sys_image_guid" => guid_str(d.guid),
        "node_desc" => format!("softverbs {}", d.name),
        "fw_ver" => concat!("softverbs ", env!("CARGO_PKG_VERSION")).into(),
        "hca_type" => "softverbs".into(),
        "hw_rev" => "0x1".into(),
        "board_id" => format!("VQP_SOFT_{:04}", d.index),
        "ports/1/state" => if up { "4: ACTIVE" } else { "1: DOWN" }.into(),
        "ports/1/phys_state" => if up { "5: LinkUp" } else { "3: Disabled" }.into(),
        "ports/1/lid" => format!("0x{:x}", d.port_lid()),
        "ports/1/sm_lid" => if roce { "0x0" } else { "0x1" }.into(),
        "ports/1/sm_sl" | "ports/1/lid_mask_count" => "0".into(),
        "ports/1/cap_mask" => if roce { "0x04010000" } else { "0x00010000" }.into(),
        "ports/1/rate" => crate::link::port_rate_text(crate::link::port_speed(d.link.rate())),
        "ports/1/link_layer" => if roce { "Ethernet" } else { "InfiniBand" }.into(),
        "ports/1/pkeys/0" => "0xffff".into(),
        _ => return None,
    })
}

/// The attribute files a soft device's `ibdev_path` holds besides its GIDs, relative
/// to it.
const SOFT_FILES: &[&str] = &[
    "node_type",
    "node_guid",
    "sys_image_guid",
    "node_desc",
    "fw_ver",
    "hca_type",
    "hw_rev",
    "board_id",
    "ports/1/state",
    "ports/1/phys_state",
    "ports/1/lid",
    "ports/1/sm_lid",
    "ports/1/sm_sl",
    "ports/1/lid_mask_count",
    "ports/1/cap_mask",
    "ports/1/rate",
    "ports/1/link_layer",
    "ports/1/pkeys/0",
];

/// Every attribute file of device `d`: [`SOFT_FILES`] and, per GID `N`,
/// `ports/1/gids/N`, `ports/1/gid_attrs/types/N` (and `gid_attrs/ndevs/N` on RoCE).
fn soft_files(d: &Device) -> Vec<String> {
    let mut v: Vec<String> = SOFT_FILES.iter().map(|f| f.to_string()).collect();
    for i in 0..d.gids().len() {
        v.push(format!("ports/1/gids/{i}"));
        v.push(format!("ports/1/gid_attrs/types/{i}"));
        if d.is_roce() {
            v.push(format!("ports/1/gid_attrs/ndevs/{i}"));
        }
    }
    v
}

/// The attribute files of soft device `index` (path relative to its `ibdev_path`, and
/// content with its newline), as a process with this environment will answer them when
/// it starts (`VQP_SOFT_LINK_DOWN`, `VQP_SOFT_RATE` and `VQP_SOFT_NETDEV` are applied,
/// the interface read in the caller's network namespace): what `softverbs run` writes
/// into the sysfs tree it presents. Starts no provider.
pub fn soft_sysfs_files(index: usize) -> Vec<(String, String)> {
    let mut d = Device::new(index);
    use crate::config::env_parsed;
    if env_parsed(crate::config::ENV_LINK_DOWN, crate::config::parse_indices)
        .is_some_and(|down| down.contains(&index))
    {
        d.link_up.store(false, std::sync::atomic::Ordering::Relaxed);
    }
    if let Some((_, rate)) = env_parsed(crate::config::ENV_RATE, crate::link::parse_rates)
        .and_then(|rates| rates.into_iter().find(|(i, _)| *i == index))
    {
        d.link.set_rate(rate);
    }
    if let Some((_, ifname)) = env_parsed(crate::config::ENV_NETDEV, crate::netdev::parse_bindings)
        .and_then(|b| b.into_iter().find(|(i, _)| *i == index))
    {
        d.netdev = Some(crate::netdev::Netdev::open(&ifname));
    }
    soft_files(&d)
        .into_iter()
        .filter_map(|f| soft_attribute(&d, &f).map(|text| (f, text + "\n")))
        .collect()
}

/// What `ibv_read_sysfs_file(dir, file)` reads: a soft device's attribute, or the file.
/// `Err` is the errno of a failed open or read.
fn read(dir: &str, file: &str, size: usize) -> Result<Vec<u8>, c_int> {
    let p = provider::get();
    if let Some(d) = p
        .devices
        .iter()
        .find(|d| dir.trim_end_matches('/') == ibdev_path(&d.name))
    {
        let mut text = soft_attribute(d, file).ok_or(libc::ENOENT)?;
        text.push('\n');
        let mut bytes = text.into_bytes();
        bytes.truncate(size);
        return Ok(bytes);
    }
    let mut f = std::fs::File::open(format!("{dir}/{file}"))
        .map_err(|e| e.raw_os_error().unwrap_or(libc::EIO))?;
    let mut buf = vec![0u8; size];
    let n = f
        .read(&mut buf)
        .map_err(|e| e.raw_os_error().unwrap_or(libc::EIO))?;
    buf.truncate(n);
    Ok(buf)
}

/// `ibv_read_sysfs_file`: reads `dir/file` into `buf` (at most `size` bytes), drops a
/// trailing newline and NUL-terminates; returns the length of the text, or -1 with
/// `errno` when the file cannot be read, and -1 (`errno` `EOVERFLOW`) when the text does
/// not fit with its terminator — rdma-core's rules. A soft device's directory serves
/// the attributes listed in the module documentation.
///
/// # Safety
/// `dir` and `file` are null or NUL-terminated strings; `buf` is writable for `size`
/// bytes.
#[cfg_attr(feature = "c-symbols", no_mangle)]
pub unsafe extern "C" fn ibv_read_sysfs_file(
    dir: *const c_char,
    file: *const c_char,
    buf: *mut c_char,
    size: usize,
) -> c_int {
    if dir.is_null() || file.is_null() || (buf.is_null() && size > 0) {
        set_errno(libc::EINVAL);
        return -1;
    }
    // SAFETY: NUL-terminated strings (contract).
    let (dir, file) = unsafe { (CStr::from_ptr(dir), CStr::from_ptr(file)) };
    let (Ok(dir), Ok(file)) = (dir.to_str(), file.to_str()) else {
        set_errno(libc::ENOENT);
        return -1;
    };
    let mut bytes = match read(dir, file, size) {
        Ok(b) => b,
        Err(errno) => {
            set_errno(errno);
            return -1;
        }
    };
    if bytes.last() == Some(&b'\n') {
        bytes.pop();
    } else if bytes.len() == size && size > 0 {
        set_errno(libc::EOVERFLOW);
        return -1;
    }
    if bytes.len() < size {
        bytes.push(0);
    }
    // SAFETY: `bytes.len() <= size`, and `buf` is writable for `size` bytes (contract).
    unsafe { core::ptr::copy_nonoverlapping(bytes.as_ptr(), buf.cast::<u8>(), bytes.len()) };
    let text = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    c_int::try_from(text).unwrap_or(c_int::MAX)
}

/// `ibv_get_sysfs_path`: `$SYSFS_PATH` without trailing slashes (only when the process
/// is not set-user-ID), else `/sys`; computed once, as rdma-core does.
#[cfg_attr(feature = "c-symbols", no_mangle)]
pub extern "C" fn ibv_get_sysfs_path() -> *const c_char {
    static PATH: OnceLock<CString> = OnceLock::new();
    PATH.get_or_init(|| {
        // SAFETY: `getuid` and `geteuid` have no preconditions.
        let same = unsafe { libc::getuid() == libc::geteuid() };
        let env = same
            .then(|| std::env::var_os("SYSFS_PATH"))
            .flatten()
            .and_then(|v| v.into_string().ok())
            .map(|v| v.trim_end_matches('/').to_string());
        CString::new(env.unwrap_or_else(|| "/sys".into())).unwrap_or_else(|_| c"/sys".into())
    })
    .as_ptr()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_attr(dir: &str, file: &str, size: usize) -> (c_int, String, c_int) {
        let d = CString::new(dir).unwrap();
        let f = CString::new(file).unwrap();
        let mut buf = vec![0x7f as c_char; size.max(1)];
        set_errno(0);
        // SAFETY: NUL-terminated strings; `buf` holds `size` bytes.
        let rc = unsafe { ibv_read_sysfs_file(d.as_ptr(), f.as_ptr(), buf.as_mut_ptr(), size) };
        let errno = std::io::Error::last_os_error().raw_os_error().unwrap();
        let text = if rc >= 0 {
            // SAFETY: NUL-terminated on success when it fits.
            unsafe { CStr::from_ptr(buf.as_ptr()) }
                .to_string_lossy()
                .into_owned()
        } else {
            String::new()
        };
        (rc, text, errno)
    }

    #[test]
    fn a_soft_device_answers_its_attributes_as_the_kernel_formats_them() {
        let d = &provider::get().devices[1];
        let dir = ibdev_path(&d.name);
        assert_eq!(
            read_attr(&dir, "board_id", 64),
            (13, "VQP_SOFT_0001".into(), 0)
        );
        let (rc, guid, _) = read_attr(&dir, "node_guid", 64);
        assert_eq!(rc, 19);
        assert_eq!(guid, guid_str(d.guid));
        assert_eq!(guid, "0200:5eff:fe00:0001");
        assert_eq!(read_attr(&dir, "ports/1/state", 64).1, "4: ACTIVE");
        assert_eq!(read_attr(&dir, "ports/1/lid", 64).1, "0x2");
        assert_eq!(
            read_attr(&format!("{dir}/"), "ports/1/gids/0", 64).1,
            "fe80:0000:0000:0000:0200:5eff:fe00:0001"
        );
        assert_eq!(
            read_attr(&dir, "no_such", 64),
            (-1, String::new(), libc::ENOENT)
        );
    }

    #[test]
    fn the_launcher_s_files_are_the_ones_the_provider_answers() {
        let d = &provider::get().devices[1];
        let files = soft_sysfs_files(1);
        assert_eq!(files.len(), SOFT_FILES.len() + 2);
        for (name, text) in &files {
            assert_eq!(Some(text.trim_end()), soft_attribute(d, name).as_deref());
            assert!(text.ends_with('\n'));
        }
        assert!(files.contains(&("ports/1/state".into(), "4: ACTIVE\n".into())));
        assert!(files.contains(&("ports/1/gid_attrs/types/0".into(), "IB/RoCE v1\n".into())));
    }

    #[test]
    fn text_that_does_not_fit_with_its_terminator_fails() {
        let dir = ibdev_path(&provider::get().devices[0].name);
        // "VQP_SOFT_0000\n" is 14 bytes: 13 of text and the newline becomes the NUL.
        assert_eq!(read_attr(&dir, "board_id", 14).0, 13);
        assert_eq!(
            read_attr(&dir, "board_id", 13),
            (-1, String::new(), libc::EOVERFLOW)
        );
    }

    #[test]
    fn other_paths_are_read_from_the_file_system() {
        let dir = std::env::temp_dir().join(format!("vqp-sysfs-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("attr"), "hello\n").unwrap();
        std::fs::write(dir.join("raw"), "abc").unwrap();
        let d = dir.to_str().unwrap();
        assert_eq!(read_attr(d, "attr", 16), (5, "hello".into(), 0));
        assert_eq!(read_attr(d, "raw", 16), (3, "abc".into(), 0));
        assert_eq!(read_attr(d, "raw", 3).0, -1);
        assert_eq!(
            read_attr(d, "missing", 16),
            (-1, String::new(), libc::ENOENT)
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn sysfs_path_is_sys_or_the_environment_once() {
        // SAFETY: a static NUL-terminated string.
        let p = unsafe { CStr::from_ptr(ibv_get_sysfs_path()) };
        let want = std::env::var("SYSFS_PATH")
            .map_or("/sys".into(), |v| v.trim_end_matches('/').to_string());
        assert_eq!(p.to_str().unwrap(), want);
        assert_eq!(ibv_get_sysfs_path(), ibv_get_sysfs_path());
    }
}
