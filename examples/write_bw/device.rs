//! Loading the verbs library, opening a device and checking the run against what the
//! device allows.

use std::path::PathBuf;

use vqp_host::{Context, DeviceList, ProtectionDomain, Verbs};

use crate::args::Params;
use crate::Fail;

/// Loads softverbs: its cdylib through the host's `dlopen` loader when it sits next to
/// this binary (cargo puts it in `target/<profile>/deps/`, examples live in
/// `target/<profile>/examples/`), else the provider linked into this binary. Returns
/// the handle and a description of which was used.
pub fn load_soft() -> (Verbs, String) {
    if let Some(path) = soft_cdylib() {
        // SAFETY: the file is vqp-softverbs' cdylib, built from this workspace, which
        // implements the libibverbs ABI.
        match unsafe { Verbs::load_from(&path) } {
            Ok(v) => return (v, format!("softverbs via dlopen {}", path.display())),
            Err(e) => eprintln!("write_bw: {e}; using the linked-in softverbs instead"),
        }
    }
    // SAFETY: the table is the provider linked into this binary: functions with
    // libibverbs' prototypes that live as long as the process.
    let v = unsafe { Verbs::from_table(vqp_softverbs::verbs_table()) };
    (
        v,
        "softverbs, in-process table (no libvqp_softverbs.so next to the binary)".into(),
    )
}

fn soft_cdylib() -> Option<PathBuf> {
    let found = vqp_softverbs::find_cdylib()?;
    // Shown relative to the working directory when it lies below it.
    let cwd = std::env::current_dir().ok();
    Some(
        match cwd.as_deref().and_then(|d| found.strip_prefix(d).ok()) {
            Some(rel) => rel.to_path_buf(),
            None => found,
        },
    )
}

/// Loads libibverbs (or what `VQP_IBVERBS_PATH` names).
pub fn load_hw() -> Result<(Verbs, String), Fail> {
    let v = Verbs::load().map_err(|e| Fail::bad(e.to_string()))?;
    let what = format!("libibverbs via dlopen {}", v.library_path().unwrap_or("?"));
    Ok((v, what))
}

/// An open device and the limits the run is checked against.
pub struct Device {
    pub name: String,
    pub pd: ProtectionDomain,
    pub ib_port: u8,
    pub gid_index: Option<u8>,
    max_qp: u64,
    max_qp_wr: u32,
    max_msg_sz: u32,
}

/// The error for a device list that could not be had: "no devices" is told as what it
/// means here — this machine has no RDMA device — with the way to run without one.
pub fn list_failed(name: &str, e: vqp_host::Error) -> Fail {
    match e {
        vqp_host::Error::NoDevices { source } => {
            let why = source.map_or(String::new(), |s| format!(": {s}"));
            Fail::bad(format!(
                "--device {name}: this machine has no RDMA device (libibverbs lists none{why}); \
                 leave out --device to run both sides in this process on softverbs, the \
                 software RDMA provider built with this program"
            ))
        }
        e => Fail::bad(format!(
            "--device {name}: cannot list the RDMA devices: {e}"
        )),
    }
}

/// Opens `name`; an unknown name lists the devices there are.
pub fn open(verbs: &Verbs, name: &str, ib_port: u8, gid_index: Option<u8>) -> Result<Device, Fail> {
    let list = DeviceList::new(verbs).map_err(|e| list_failed(name, e))?;
    let Ok(dev) = list.find(name) else {
        let names: Vec<String> = list.iter().map(|d| d.name()).collect();
        return Err(Fail::bad(format!(
            "--device: no RDMA device named '{name}' (there are: {})",
            names.join(", ")
        )));
    };
    let ctx: Context = dev.open().map_err(|e| Fail::bad(format!("{name}: {e}")))?;
    let attr = ctx
        .query_device()
        .map_err(|e| Fail::bad(format!("{name}: {e}")))?;
    if ib_port == 0 || ib_port > attr.phys_port_cnt() {
        return Err(Fail::bad(format!(
            "--ib-port {ib_port}: {name} has ports 1 to {}",
            attr.phys_port_cnt()
        )));
    }
    let port = ctx
        .query_port(ib_port)
        .map_err(|e| Fail::bad(format!("{name} port {ib_port}: {e}")))?;
    let pd = ctx
        .alloc_pd()
        .map_err(|e| Fail::bad(format!("{name}: {e}")))?;
    Ok(Device {
        name: name.to_string(),
        pd,
        ib_port,
        gid_index,
        max_qp: u64::try_from(attr.raw().max_qp).unwrap_or(0),
        max_qp_wr: attr.max_qp_wr(),
        max_msg_sz: port.raw().max_msg_sz,
    })
}

impl Device {
    /// Checks `p` against the device: QPs, WQEs per QP, bytes per WQE.
    pub fn check(&self, p: &Params, depth: u32) -> Result<(), String> {
        let qps = p.qps as u64 + u64::from(p.mode == vqp_core::Mode::Spray && p.qps > 1);
        if qps > self.max_qp {
            return Err(format!(
                "--qps {}: {} allows {} QPs",
                p.qps, self.name, self.max_qp
            ));
        }
        if depth > self.max_qp_wr {
            return Err(format!(
                "{} allows {} WQEs per QP; this program needs {depth}",
                self.name, self.max_qp_wr
            ));
        }
        if p.max_frag > self.max_msg_sz {
            return Err(format!(
                "--max-frag {}: {} port {} carries at most {} bytes per work request",
                p.max_frag, self.name, self.ib_port, self.max_msg_sz
            ));
        }
        if p.qps == 1 && p.size > u64::from(self.max_msg_sz) {
            return Err(format!(
                "--size {}: with one data QP a message is one work request, and {} carries at most {} bytes",
                p.size, self.name, self.max_msg_sz
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_devices_says_so_and_how_to_run_without_one() {
        for (source, why) in [
            (
                Some(std::io::Error::from_raw_os_error(libc::ENOSYS)),
                "lists none: Function not implemented (os error 38))",
            ),
            (None, "lists none)"),
        ] {
            let f = list_failed("mlx5_0", vqp_host::Error::NoDevices { source });
            assert!(
                f.msg
                    .starts_with("--device mlx5_0: this machine has no RDMA device"),
                "{}",
                f.msg
            );
            assert!(f.msg.contains(why), "{}", f.msg);
            assert!(f.msg.contains("leave out --device"), "{}", f.msg);
            assert_eq!(f.code, 2);
        }
    }
}
