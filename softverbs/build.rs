//! Link settings of the cdylib, so that it can stand in for `libibverbs.so.1`:
//!
//! - `-z nodelete`: the provider's background progress thread and its thread-locals must
//!   never see their code unmapped by a `dlclose`;
//! - SONAME `libibverbs.so.1`;
//! - rdma-core's symbol versions (`libibverbs.map`): a program linked against rdma-core's
//!   library asks for `ibv_get_device_list@IBVERBS_1.1`, `ibv_qp_to_qp_ex@IBVERBS_1.6`, …
//!
//! How the versions are given is `build-support/elf_versions.rs`, shared with
//! vqp-rdmacm: the map as a second version script, and an object naming each function
//! `name@@VERSION`. Here the object also holds the entries that are not the crate's
//! definition of their own name — older versions (`name@IBVERBS_1.0`,
//! `ibv_query_gid_type@IBVERBS_PRIVATE_34`, …) and the provider-private names the crate
//! does not implement: one jump each, to the crate function that serves them
//! (`abi::compat`), or a zero byte for the one variable.
//!
//! LLD is the default linker of Rust ≥ 1.90 on x86_64 Linux; the link arguments name
//! the toolchain's own `rust-lld`. Without it in the toolchain, or on a target other
//! than x86_64 and aarch64 (the jumps are written for those), the library gets its
//! SONAME but no versions, and the build says so.
use std::path::PathBuf;

#[allow(dead_code)]
#[path = "src/symbols.rs"]
mod symbols;

#[path = "../build-support/elf_versions.rs"]
mod elf_versions;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=libibverbs.map");
    println!("cargo:rerun-if-changed=src/symbols.rs");
    println!("cargo:rerun-if-changed=../build-support/elf_versions.rs");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-z,nodelete");
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    if os != "linux" || std::env::var_os("CARGO_FEATURE_C_SYMBOLS").is_none() {
        // No ELF symbol versions to give, or no C names to give them to.
        return;
    }
    println!(
        "cargo:rustc-cdylib-link-arg=-Wl,-soname,{}",
        symbols::SONAME
    );
    match versions() {
        Ok(args) => {
            for a in args {
                println!("cargo:rustc-cdylib-link-arg={a}");
            }
        }
        Err(why) => println!(
            "cargo:warning=libvqp_softverbs.so is built without libibverbs' symbol \
             versions: {why}"
        ),
    }
}

/// The link arguments that give the cdylib its symbol versions.
fn versions() -> Result<Vec<String>, String> {
    let manifest = PathBuf::from(elf_versions::env("CARGO_MANIFEST_DIR")?);
    let nodes = symbols::parse_map(symbols::LIBIBVERBS_MAP).map_err(|e| e.to_string())?;
    let exports = symbols::exports(&nodes).map_err(|e| e.to_string())?;
    let entries: Vec<elf_versions::Entry> = exports
        .iter()
        .map(|e| {
            let v = e.versioned_name();
            match e.target {
                symbols::Target::Crate if e.default => elf_versions::Entry::Default(v),
                symbols::Target::Crate => elf_versions::Entry::Jump(v, e.name.clone()),
                symbols::Target::Stub(kind) => match kind.function() {
                    Some(f) => elf_versions::Entry::Jump(v, f.to_string()),
                    None => elf_versions::Entry::Byte(v),
                },
            }
        })
        .collect();
    elf_versions::link_args(
        &manifest.join("libibverbs.map"),
        "libibverbs_versions",
        &entries,
    )
}
