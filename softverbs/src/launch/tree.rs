//! The sysfs entries the launcher presents under `/sys/class`, as the kernel lays them
//! out for an RDMA device: `infiniband/soft<i>/` (the attributes, as
//! [`crate::soft_sysfs_files`] gives them, and a `device/` directory standing for the
//! parent device), `infiniband_verbs/abi_version` and `infiniband_verbs/uverbs<i>/`
//! (`ibdev`, `abi_version`, `dev`, `device`). Built as a list, written by `mount`.

/// One entry, its path relative to `/sys/class`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Node {
    /// A directory (parents come before their children).
    Dir(String),
    /// A read-only file and its content.
    File(String, String),
    /// A symbolic link and its (relative) target.
    Link(String, String),
}

/// The uverbs ABI version the kernel's `ib_uverbs` reports in
/// `/sys/class/infiniband_verbs/abi_version` (`IB_USER_VERBS_ABI_VERSION`).
const UVERBS_ABI_VERSION: u32 = 6;

/// What stands for the device's parent (a PCI function on a NIC) in `device/`: no vendor
/// (0xffff, which PCI reserves as "no device"), no NUMA node, every CPU local. UCX reads
/// `local_cpus` and `numa_node` here for its topology; it matches `vendor`/`device`
/// against its table of known NICs, and an unknown one gets its generic verbs support.
fn parent_device(dev: &str, cpus: &Cpus) -> Vec<Node> {
    let d = format!("infiniband/{dev}/device");
    let file = |name: &str, text: String| Node::File(format!("{d}/{name}"), text + "\n");
    vec![
        Node::Dir(d.clone()),
        file("vendor", "0xffff".into()),
        file("device", "0xffff".into()),
        file("subsystem_vendor", "0xffff".into()),
        file("subsystem_device", "0xffff".into()),
        file("numa_node", "-1".into()),
        file("local_cpus", cpus.mask()),
        file("local_cpulist", cpus.list.clone()),
    ]
}

/// The CPUs of the machine, for `local_cpus` / `local_cpulist`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cpus {
    /// The online CPUs in the kernel's list format (`0-3,8`).
    pub list: String,
    /// How many CPU ids the kernel may use (the mask's width).
    pub possible: usize,
}

impl Cpus {
    /// The machine's, from `/sys/devices/system/cpu/{online,possible}` (the namespace
    /// leaves `/sys/devices` as it is).
    pub fn of_machine() -> Cpus {
        let read = |f: &str| {
            std::fs::read_to_string(format!("/sys/devices/system/cpu/{f}"))
                .map(|s| s.trim().to_string())
                .ok()
        };
        let fallback = || {
            let n = std::thread::available_parallelism().map_or(1, |n| n.get());
            if n == 1 {
                "0".to_string()
            } else {
                format!("0-{}", n - 1)
            }
        };
        let list = read("online").unwrap_or_else(fallback);
        let possible = read("possible")
            .and_then(|p| cpu_ids(&p).map(|ids| ids.into_iter().max().map_or(1, |m| m + 1)))
            .unwrap_or(1);
        let highest = cpu_ids(&list).and_then(|ids| ids.into_iter().max());
        Cpus {
            possible: possible.max(highest.map_or(1, |h| h + 1)),
            list,
        }
    }

    /// The kernel's cpumask format: 32-bit hex words, most significant first, separated
    /// by commas, `possible` bits wide.
    pub fn mask(&self) -> String {
        let words = self.possible.div_ceil(32).max(1);
        let mut bits = vec![0u32; words];
        for id in cpu_ids(&self.list).unwrap_or_default() {
            if let Some(w) = bits.get_mut(id / 32) {
                *w |= 1 << (id % 32);
            }
        }
        let mut out: Vec<String> = bits.iter().rev().map(|w| format!("{w:08x}")).collect();
        let rem = self.possible % 32;
        if rem != 0 {
            // The most significant word is printed only as wide as its CPUs need.
            let hex = rem.div_ceil(4);
            out[0] = out[0][8 - hex..].to_string();
        }
        out.join(",")
    }
}

/// The CPU ids of a list like `0-3,8`; `None` when it does not parse.
fn cpu_ids(list: &str) -> Option<Vec<usize>> {
    let mut out = Vec::new();
    for part in list.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (usize, usize) = (a.parse().ok()?, b.parse().ok()?);
                if b < a || b - a > 1 << 16 {
                    return None;
                }
                out.extend(a..=b);
            }
            None => out.push(part.parse().ok()?),
        }
    }
    Some(out)
}

/// Every entry for `devices` soft devices whose `/dev/infiniband/uverbs<i>` is the
/// character device `rdev` (`major:minor`, what `uverbs<i>/dev` says).
pub fn nodes(devices: usize, rdev: (u32, u32), cpus: &Cpus) -> Vec<Node> {
    let mut out = vec![
        Node::Dir("infiniband".into()),
        Node::Dir("infiniband_verbs".into()),
        Node::File(
            "infiniband_verbs/abi_version".into(),
            format!("{UVERBS_ABI_VERSION}\n"),
        ),
    ];
    for i in 0..devices {
        let dev = format!("soft{i}");
        let base = format!("infiniband/{dev}");
        out.push(Node::Dir(base.clone()));
        let mut dirs: Vec<String> = Vec::new();
        for (file, text) in crate::soft_sysfs_files(i) {
            // Each parent directory once, before the file.
            let mut parent = String::new();
            for part in file
                .split('/')
                .collect::<Vec<_>>()
                .split_last()
                .map_or(&[][..], |s| s.1)
            {
                parent = if parent.is_empty() {
                    part.to_string()
                } else {
                    format!("{parent}/{part}")
                };
                if !dirs.contains(&parent) {
                    dirs.push(parent.clone());
                    out.push(Node::Dir(format!("{base}/{parent}")));
                }
            }
            out.push(Node::File(format!("{base}/{file}"), text));
        }
        out.extend(parent_device(&dev, cpus));
        let uv = format!("infiniband_verbs/uverbs{i}");
        out.push(Node::Dir(uv.clone()));
        out.push(Node::File(format!("{uv}/ibdev"), format!("{dev}\n")));
        out.push(Node::File(format!("{uv}/abi_version"), "1\n".into()));
        out.push(Node::File(
            format!("{uv}/dev"),
            format!("{}:{}\n", rdev.0, rdev.1),
        ));
        out.push(Node::Link(
            format!("{uv}/device"),
            format!("../../infiniband/{dev}/device"),
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cpus(list: &str, possible: usize) -> Cpus {
        Cpus {
            list: list.into(),
            possible,
        }
    }

    #[test]
    fn cpu_masks_are_formatted_as_the_kernel_formats_them() {
        assert_eq!(cpus("0-1", 2).mask(), "3");
        assert_eq!(cpus("0-7", 8).mask(), "ff");
        assert_eq!(cpus("0-3", 32).mask(), "0000000f");
        assert_eq!(cpus("0,33", 64).mask(), "00000002,00000001");
        assert_eq!(cpus("0-35", 36).mask(), "f,ffffffff");
        assert_eq!(cpu_ids("0-2,5"), Some(vec![0, 1, 2, 5]));
        assert_eq!(cpu_ids("x"), None);
    }

    #[test]
    fn each_device_has_its_attributes_its_parent_and_its_uverbs_entry() {
        let n = nodes(2, (1, 3), &cpus("0-1", 2));
        let file = |p: &str| {
            n.iter().find_map(|e| match e {
                Node::File(path, text) if path == p => Some(text.as_str()),
                _ => None,
            })
        };
        assert_eq!(file("infiniband/soft1/ports/1/state"), Some("4: ACTIVE\n"));
        assert_eq!(file("infiniband/soft0/node_type"), Some("1: CA\n"));
        assert_eq!(file("infiniband/soft1/device/local_cpus"), Some("3\n"));
        assert_eq!(file("infiniband_verbs/uverbs1/ibdev"), Some("soft1\n"));
        assert_eq!(file("infiniband_verbs/uverbs0/dev"), Some("1:3\n"));
        assert_eq!(file("infiniband_verbs/abi_version"), Some("6\n"));
        assert_eq!(file("infiniband/soft2/node_type"), None);
        // Every file's directory is listed before it, once.
        let mut seen = vec![String::new()];
        for e in &n {
            match e {
                Node::Dir(p) => {
                    assert!(!seen.contains(p), "{p} twice");
                    seen.push(p.clone());
                }
                Node::File(p, _) | Node::Link(p, _) => {
                    let parent = p.rsplit_once('/').map_or("", |s| s.0);
                    assert!(seen.iter().any(|s| s == parent), "{p} before its directory");
                }
            }
        }
    }
}
