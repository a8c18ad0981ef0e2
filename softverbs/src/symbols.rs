//! libibverbs' symbol versions as the cdylib exports them: `libibverbs.map` read into
//! version nodes, and the (name, version) pairs that follow from it.
//!
//! The map is rdma-core's `libibverbs.map.in` (public nodes of v64.0, plus
//! `ibv_query_gid_type` under rdma-core's private ABI versions; its header says more).
//! `build.rs` includes this same file to generate the versioned definitions and hands the
//! map to the linker as its version script; the tests read it to check the built library.
//! It is plain `std` code for that reason.

use core::fmt;

/// `libibverbs.map` as checked in.
pub const LIBIBVERBS_MAP: &str = include_str!("../libibverbs.map");

/// The SONAME the cdylib carries, as rdma-core's library does.
pub const SONAME: &str = "libibverbs.so.1";

/// One version node of a map: `NAME { global: a; b; local: *; } PARENT;`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VersionNode {
    /// The version name, e.g. `IBVERBS_1.1`.
    pub name: String,
    /// The node it inherits from, if any.
    pub parent: Option<String>,
    /// The names under `global:`, in file order.
    pub symbols: Vec<String>,
}

/// What an exported (name, version) pair runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// The crate's own function of that name.
    Crate,
    /// One of the crate's failing functions ([`StubKind`]): an `IBVERBS_1.0` entry,
    /// whose libibverbs 1.0 structs softverbs does not have, or a provider-private name
    /// softverbs does not implement.
    Stub(StubKind),
}

/// One exported (name, version) pair.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Export {
    /// The C name.
    pub name: String,
    /// The version node.
    pub version: String,
    /// Whether this is the name's default version (`name@@VERSION`, what a program
    /// linked now binds to) rather than an older one (`name@VERSION`).
    pub default: bool,
    /// What runs.
    pub target: Target,
}

impl Export {
    /// The name as the object file spells it: `name@@VERSION` or `name@VERSION`.
    pub fn versioned_name(&self) -> String {
        let at = if self.default { "@@" } else { "@" };
        format!("{}{at}{}", self.name, self.version)
    }
}

/// A map that does not parse.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MapError {
    /// What was expected or found, with the token.
    pub what: String,
}

impl fmt::Display for MapError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "libibverbs.map: {}", self.what)
    }
}

impl std::error::Error for MapError {}

fn err<T>(what: String) -> Result<T, MapError> {
    Err(MapError { what })
}

/// The text without `/* … */` comments, split into tokens: words, `{`, `}`, `;`, `:`.
fn tokens(text: &str) -> Result<Vec<String>, MapError> {
    let mut plain = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("/*") {
        plain.push_str(&rest[..start]);
        let Some(end) = rest[start..].find("*/") else {
            return err("unterminated comment".into());
        };
        plain.push(' ');
        rest = &rest[start + end + 2..];
    }
    plain.push_str(rest);
    let mut out = Vec::new();
    let mut word = String::new();
    for c in plain.chars() {
        if c.is_whitespace() || matches!(c, '{' | '}' | ';' | ':') {
            if !word.is_empty() {
                out.push(std::mem::take(&mut word));
            }
            if !c.is_whitespace() {
                out.push(c.to_string());
            }
        } else {
            word.push(c);
        }
    }
    if !word.is_empty() {
        out.push(word);
    }
    Ok(out)
}

/// Reads a version script made of named nodes (the subset of the GNU syntax
/// libibverbs' map uses: `global:` and `local:` lists of plain names, `local: *`).
///
/// # Errors
/// [`MapError`] on anything else: a wildcard under `global:`, an anonymous node, a
/// node listed twice, a missing `;`.
pub fn parse_map(text: &str) -> Result<Vec<VersionNode>, MapError> {
    let toks = tokens(text)?;
    let mut it = toks.iter().map(String::as_str).peekable();
    let mut nodes: Vec<VersionNode> = Vec::new();
    while let Some(name) = it.next() {
        if name == "{" {
            return err("anonymous version node".into());
        }
        if nodes.iter().any(|n| n.name == name) {
            return err(format!("node {name} listed twice"));
        }
        if it.next() != Some("{") {
            return err(format!("expected `{{` after {name}"));
        }
        let mut node = VersionNode {
            name: name.to_string(),
            parent: None,
            symbols: Vec::new(),
        };
        let mut global = true;
        loop {
            match it.next() {
                None => return err(format!("node {name} is not closed")),
                Some("}") => break,
                Some(scope @ ("global" | "local")) => {
                    if it.next() != Some(":") {
                        return err(format!("expected `:` after {scope} in {name}"));
                    }
                    global = scope == "global";
                }
                Some(sym) => {
                    if it.next() != Some(";") {
                        return err(format!("expected `;` after {sym} in {name}"));
                    }
                    if global {
                        if sym.contains(['*', '?', '[']) {
                            return err(format!("wildcard {sym} under global: in {name}"));
                        }
                        node.symbols.push(sym.to_string());
                    } else if sym != "*" {
                        return err(format!("local name {sym} in {name}: only `*` is used"));
                    }
                }
            }
        }
        match it.next() {
            Some(";") => {}
            Some(parent) => {
                if !nodes.iter().any(|n| n.name == parent) {
                    return err(format!("{name} inherits from unknown node {parent}"));
                }
                node.parent = Some(parent.to_string());
                if it.next() != Some(";") {
                    return err(format!("expected `;` after the parent of {name}"));
                }
            }
            None => return err(format!("expected `;` after node {name}")),
        }
        nodes.push(node);
    }
    Ok(nodes)
}

/// Whether a node is one of rdma-core's provider-private ABI versions.
pub fn is_private(node: &str) -> bool {
    node.starts_with("IBVERBS_PRIVATE_")
}

/// The provider-private names the crate implements (the others are stubs).
pub const IMPLEMENTED_PRIVATE: [&str; 2] = ["ibv_query_gid_type", "ibv_wr_opcode_str"];

/// Every (name, version) pair the nodes define. A name's default version is the last
/// node listing it. A public name runs the crate's function under its default version
/// and a stub under an older one (`IBVERBS_1.0`, see [`compat_kind`]); a private name
/// runs the crate's function under each of its versions if the crate implements it
/// ([`IMPLEMENTED_PRIVATE`]), else a stub ([`private_kind`]). Ordered by node, then as
/// listed.
///
/// # Errors
/// [`MapError`] for a name that needs a stub of unknown kind (a name new to the map).
pub fn exports(nodes: &[VersionNode]) -> Result<Vec<Export>, MapError> {
    let mut out = Vec::new();
    for (i, node) in nodes.iter().enumerate() {
        for name in &node.symbols {
            let default = !nodes[i + 1..].iter().any(|n| n.symbols.contains(name));
            let kind = if is_private(&node.name) {
                if IMPLEMENTED_PRIVATE.contains(&name.as_str()) {
                    None
                } else {
                    Some(private_kind(name).ok_or_else(|| MapError {
                        what: format!("no stub kind for the private name {name}"),
                    })?)
                }
            } else if default {
                None
            } else {
                Some(compat_kind(name).ok_or_else(|| MapError {
                    what: format!("no stub kind for {name}@{}", node.name),
                })?)
            };
            out.push(Export {
                name: name.clone(),
                version: node.name.clone(),
                default,
                target: kind.map_or(Target::Crate, Target::Stub),
            });
        }
    }
    Ok(out)
}

/// What a stub returns, by its C prototype's return type. Each kind is one function of
/// the crate (`abi::compat`), which the stub entry jumps to; [`StubKind::Data`] is a
/// variable instead.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StubKind {
    /// A pointer: null, `errno` = `EOPNOTSUPP`.
    Null,
    /// An `int` errno-style result: `EOPNOTSUPP`.
    Errno,
    /// An `int` that is -1 on failure: -1, `errno` = `EOPNOTSUPP`.
    MinusOne,
    /// `void`: nothing is done.
    Void,
    /// An integer that is not an error code (`ibv_get_device_guid`): 0, `errno` =
    /// `EOPNOTSUPP`.
    Zero,
    /// A `bool` variable (`verbs_allow_disassociate_destroy`): one zero byte per
    /// version.
    Data,
}

impl StubKind {
    /// The crate's function the stub entry jumps to (`None` for [`StubKind::Data`]).
    pub fn function(self) -> Option<&'static str> {
        Some(match self {
            StubKind::Null => "vqp_soft_compat_null",
            StubKind::Errno => "vqp_soft_compat_errno",
            StubKind::MinusOne => "vqp_soft_compat_minus_one",
            StubKind::Void => "vqp_soft_compat_void",
            StubKind::Zero => "vqp_soft_compat_zero",
            StubKind::Data => return None,
        })
    }
}

/// The kind of the `IBVERBS_1.0` entry of `name`, by its prototype; `None` for a name
/// that has none.
pub fn compat_kind(name: &str) -> Option<StubKind> {
    Some(match name {
        "ibv_get_device_list"
        | "ibv_get_device_name"
        | "ibv_open_device"
        | "ibv_alloc_pd"
        | "ibv_reg_mr"
        | "ibv_create_cq"
        | "ibv_create_srq"
        | "ibv_create_qp"
        | "ibv_create_ah" => StubKind::Null,
        "ibv_close_device" | "ibv_query_device" | "ibv_query_port" | "ibv_query_pkey"
        | "ibv_dealloc_pd" | "ibv_dereg_mr" | "ibv_resize_cq" | "ibv_destroy_cq"
        | "ibv_modify_srq" | "ibv_query_srq" | "ibv_destroy_srq" | "ibv_query_qp"
        | "ibv_modify_qp" | "ibv_destroy_qp" | "ibv_destroy_ah" | "ibv_attach_mcast"
        | "ibv_detach_mcast" => StubKind::Errno,
        "ibv_get_async_event" | "ibv_get_cq_event" | "ibv_query_gid" => StubKind::MinusOne,
        "ibv_free_device_list" | "ibv_ack_async_event" | "ibv_ack_cq_events" => StubKind::Void,
        "ibv_get_device_guid" => StubKind::Zero,
        _ => return None,
    })
}

/// The kind of the stub of a provider-private name softverbs does not implement, by
/// its prototype in rdma-core's `driver.h`; `None` for a name not known here.
pub fn private_kind(name: &str) -> Option<StubKind> {
    if name.starts_with("ibv_cmd_") {
        return Some(StubKind::Errno);
    }
    if name.starts_with("verbs_register_driver_") {
        return Some(StubKind::Void);
    }
    Some(match name {
        "execute_ioctl" | "ibv_get_fw_ver" => StubKind::Errno,
        "ibv_read_ibdev_sysfs_file" => StubKind::MinusOne,
        "__ioctl_final_num_attrs" => StubKind::Zero,
        "__verbs_log"
        | "verbs_init_cq"
        | "verbs_set_ops"
        | "verbs_uninit_context"
        | "ibv_dmabuf_heap_destroy"
        | "ibv_dmabuf_heap_free" => StubKind::Void,
        "_verbs_init_and_alloc_context"
        | "verbs_open_device"
        | "ibv_dmabuf_heap_alloc"
        | "ibv_dmabuf_heap_cc_shared_init" => StubKind::Null,
        "verbs_allow_disassociate_destroy" => StubKind::Data,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map() -> Vec<VersionNode> {
        parse_map(LIBIBVERBS_MAP).expect("the checked-in map parses")
    }

    #[test]
    fn the_map_has_rdma_cores_public_nodes_in_order() {
        let nodes = map();
        let public: Vec<&str> = nodes
            .iter()
            .map(|n| n.name.as_str())
            .filter(|n| !is_private(n))
            .collect();
        let expected: Vec<String> = ["1.0", "1.1"]
            .into_iter()
            .map(String::from)
            .chain((5..=17).map(|m| format!("1.{m}")))
            .map(|v| format!("IBVERBS_{v}"))
            .collect();
        assert_eq!(public, expected);
        // Each public node after the first inherits from the one before it.
        for pair in nodes.windows(2).filter(|w| !is_private(&w[1].name)) {
            assert_eq!(pair[1].parent.as_deref(), Some(pair[0].name.as_str()));
        }
        let names: std::collections::BTreeSet<&str> = nodes
            .iter()
            .filter(|n| !is_private(&n.name))
            .flat_map(|n| n.symbols.iter().map(String::as_str))
            .collect();
        assert_eq!(names.len(), 84, "v64.0 has 84 public names");
        assert!(names.contains("ibv_qp_to_qp_ex") && names.contains("ibv_reg_buf_mr"));
        let private: Vec<&str> = nodes
            .iter()
            .map(|n| n.name.as_str())
            .filter(|n| is_private(n))
            .collect();
        assert_eq!(
            private,
            ["25", "33", "34", "57", "59", "64"].map(|a| format!("IBVERBS_PRIVATE_{a}"))
        );
    }

    #[test]
    fn defaults_are_the_newest_node_and_old_entries_are_stubs_or_the_same_function() {
        let ex = exports(&map()).unwrap();
        let find = |name: &str, version: &str| {
            ex.iter()
                .find(|e| e.name == name && e.version == version)
                .map(|e| (e.default, e.target))
        };
        assert_eq!(
            find("ibv_get_device_list", "IBVERBS_1.1"),
            Some((true, Target::Crate))
        );
        assert_eq!(
            find("ibv_get_device_list", "IBVERBS_1.0"),
            Some((false, Target::Stub(StubKind::Null)))
        );
        assert_eq!(
            find("ibv_rate_to_mult", "IBVERBS_1.0"),
            Some((true, Target::Crate))
        );
        assert_eq!(
            find("ibv_qp_to_qp_ex", "IBVERBS_1.6"),
            Some((true, Target::Crate))
        );
        assert_eq!(
            find("ibv_query_gid_type", "IBVERBS_PRIVATE_64"),
            Some((true, Target::Crate))
        );
        assert_eq!(
            find("ibv_query_gid_type", "IBVERBS_PRIVATE_34"),
            Some((false, Target::Crate))
        );
        assert_eq!(
            find("ibv_cmd_destroy_cq", "IBVERBS_PRIVATE_34"),
            Some((false, Target::Stub(StubKind::Errno)))
        );
        assert_eq!(
            find("verbs_register_driver_34", "IBVERBS_PRIVATE_34"),
            Some((true, Target::Stub(StubKind::Void)))
        );
        // One default per name.
        let mut defaults: Vec<&str> = ex
            .iter()
            .filter(|e| e.default)
            .map(|e| e.name.as_str())
            .collect();
        let n = defaults.len();
        defaults.sort_unstable();
        defaults.dedup();
        assert_eq!(defaults.len(), n);
        let e = ex.iter().find(|e| !e.default).unwrap();
        assert_eq!(e.versioned_name(), format!("{}@{}", e.name, e.version));
    }

    #[test]
    fn every_stub_has_a_kind_and_unknown_names_are_refused() {
        assert!(exports(&map()).is_ok());
        assert_eq!(compat_kind("ibv_reg_mr_iova2"), None);
        assert_eq!(private_kind("ibv_cmd_anything_new"), Some(StubKind::Errno));
        let unknown = parse_map("IBVERBS_PRIVATE_99 { global: brand_new; };").unwrap();
        let e = exports(&unknown).unwrap_err();
        assert!(e.to_string().contains("brand_new"), "{e}");
        let old = parse_map("V0 { global: f; }; V1 { global: f; } V0;").unwrap();
        assert!(exports(&old).unwrap_err().to_string().contains("f@V0"));
        assert_eq!(StubKind::Data.function(), None);
    }
    #[test]
    fn bad_maps_are_refused_with_the_reason() {
        let cases = [
            ("{ global: a; };", "anonymous"),
            ("V { global: a* ; };", "wildcard"),
            ("V { global: a };", "expected `;`"),
            ("V { global: a; } W;", "unknown node W"),
            ("V { global: a; }; V { global: b; };", "twice"),
            ("V { global: a;", "not closed"),
            ("/* open", "unterminated"),
        ];
        for (text, what) in cases {
            let e = parse_map(text).expect_err(text);
            assert!(e.to_string().contains(what), "{text}: {e}");
        }
        let ok = parse_map("A { global: x; local: *; }; B { global: y; } A;").unwrap();
        assert_eq!(ok[1].parent.as_deref(), Some("A"));
        assert_eq!(ok[0].symbols, ["x"]);
    }
}
