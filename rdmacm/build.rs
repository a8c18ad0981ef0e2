//! Link settings of the cdylib, so that it can stand in for `librdmacm.so.1`: SONAME
//! `librdmacm.so.1`, `-z nodelete` (the agent thread must never see its code unmapped)
//! and rdma-core's symbol versions from `librdmacm.map` (`RDMACM_1.0` … `RDMACM_1.5`).
//!
//! The machinery is softverbs': the map is read with its parser
//! (`softverbs/src/symbols.rs`) and the versions given by
//! `build-support/elf_versions.rs` (the map as a second version script, and an object
//! naming each function `name@@VERSION`). Every librdmacm name has one version, its
//! default, so there are no jumps here. Without the toolchain's `rust-lld` the library
//! gets its SONAME but no versions, and the build says so.
use std::collections::BTreeMap;
use std::path::PathBuf;

#[allow(dead_code)]
#[path = "../softverbs/src/symbols.rs"]
mod symbols;

#[allow(dead_code)]
#[path = "../build-support/elf_versions.rs"]
mod elf_versions;

/// The SONAME rdma-core's library carries.
const SONAME: &str = "librdmacm.so.1";

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=librdmacm.map");
    println!("cargo:rerun-if-changed=../softverbs/src/symbols.rs");
    println!("cargo:rerun-if-changed=../build-support/elf_versions.rs");
    if std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default() != "linux" {
        return;
    }
    println!("cargo:rustc-cdylib-link-arg=-Wl,-z,nodelete");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,{SONAME}");
    match versions() {
        Ok(args) => {
            for a in args {
                println!("cargo:rustc-cdylib-link-arg={a}");
            }
        }
        Err(why) => println!(
            "cargo:warning=libvqp_rdmacm.so is built without librdmacm's symbol versions: {why}"
        ),
    }
}

/// The link arguments that give the cdylib its symbol versions.
fn versions() -> Result<Vec<String>, String> {
    let manifest = PathBuf::from(elf_versions::env("CARGO_MANIFEST_DIR")?);
    let map = manifest.join("librdmacm.map");
    let text =
        std::fs::read_to_string(&map).map_err(|e| format!("reading {}: {e}", map.display()))?;
    let nodes = symbols::parse_map(&text).map_err(|e| e.to_string())?;
    let mut seen = BTreeMap::new();
    let mut entries = Vec::new();
    for node in &nodes {
        for name in &node.symbols {
            if let Some(first) = seen.insert(name.clone(), node.name.clone()) {
                // rdma-core's RDMACM_1.0 lists a few names twice; one name under two
                // versions would need the jumps softverbs makes, which nothing here needs.
                if first != node.name {
                    return Err(format!("{name} is listed under {first} and {}", node.name));
                }
                continue;
            }
            entries.push(elf_versions::Entry::Default(format!(
                "{name}@@{}",
                node.name
            )));
        }
    }
    elf_versions::link_args(&map, "librdmacm_versions", &entries)
}
