//! Link settings of the cdylib, so that it can stand in for `libibverbs.so.1`:
//!
//! - `-z nodelete`: the provider's background progress thread and its thread-locals must
//!   never see their code unmapped by a `dlclose`;
//! - SONAME `libibverbs.so.1`;
//! - rdma-core's symbol versions (`libibverbs.map`): a program linked against rdma-core's
//!   library asks for `ibv_get_device_list@IBVERBS_1.1`, `ibv_qp_to_qp_ex@IBVERBS_1.6`, …
//!
//! The versions take two pieces, because rustc links every cdylib with its own anonymous
//! version script (`{ global: <exports>; local: *; };`). GNU ld refuses to combine that
//! with named nodes; LLD accepts it, but a name the anonymous script lists stays
//! unversioned whatever a second script says. So:
//! 1. `libibverbs.map` is passed as a second version script: it defines the version
//!    nodes, and LLD's `--no-undefined-version` (rustc passes it) fails the link if the
//!    crate leaves any listed name undefined;
//! 2. a small object, generated here from the same map and compiled with this build's
//!    own `rustc` (`global_asm!`), names each function `name@@VERSION`. LLD merges that
//!    name with the crate's `#[no_mangle]` definition of `name`, which then carries the
//!    version (a name with `@` in it is not touched by either version script's lists).
//!    The object also holds the entries that are not the crate's definition of their
//!    own name — older versions (`name@IBVERBS_1.0`,
//!    `ibv_query_gid_type@IBVERBS_PRIVATE_34`, …) and the provider-private names the
//!    crate does not implement: one jump each, to the crate function that serves them
//!    (`abi::compat`), or a zero byte for the one variable.
//!
//! Both are passed to the cdylib's link only (`rustc-cdylib-link-arg`), never to programs
//! that link the rlib. LLD is the default linker of Rust ≥ 1.90 on x86_64 Linux; the
//! link arguments name the toolchain's own `rust-lld` (through its `gcc-ld` wrapper,
//! as rustc does) so that the cdylib links the same way with an older toolchain or
//! another default linker. Without `rust-lld` in the toolchain, or on a target other
//! than x86_64 and aarch64 (the jumps are written for those), the library gets its
//! SONAME but no versions, and the build says so.
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

#[allow(dead_code)]
#[path = "src/symbols.rs"]
mod symbols;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=libibverbs.map");
    println!("cargo:rerun-if-changed=src/symbols.rs");
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
    let manifest = PathBuf::from(env("CARGO_MANIFEST_DIR")?);
    let out = PathBuf::from(env("OUT_DIR")?);
    let rustc = env("RUSTC")?;
    let target = env("TARGET")?;
    let arch = env("CARGO_CFG_TARGET_ARCH")?;
    let gcc_ld = lld_wrapper_dir(&rustc, &env("HOST")?)?;

    let nodes = symbols::parse_map(symbols::LIBIBVERBS_MAP).map_err(|e| e.to_string())?;
    let source = out.join("libibverbs_versions.rs");
    let exports = symbols::exports(&nodes).map_err(|e| e.to_string())?;
    std::fs::write(&source, versions_source(&exports, &arch)?)
        .map_err(|e| format!("writing {}: {e}", source.display()))?;
    let object = out.join("libibverbs_versions.o");
    let status = Command::new(&rustc)
        .args(["--edition", "2021", "--crate-type", "lib", "--emit", "obj"])
        .args([
            "--crate-name",
            "vqp_softverbs_versions",
            "--cap-lints",
            "allow",
        ])
        .args([
            "-C",
            "opt-level=0",
            "-C",
            "debuginfo=0",
            "--target",
            &target,
        ])
        .arg("-o")
        .arg(&object)
        .arg(&source)
        .status()
        .map_err(|e| format!("running {rustc}: {e}"))?;
    if !status.success() {
        return Err(format!("{rustc} could not compile {}", source.display()));
    }
    let map = manifest.join("libibverbs.map");
    Ok(vec![
        format!("-B{}", gcc_ld.display()),
        "-fuse-ld=lld".into(),
        format!("-Wl,--version-script={}", map.display()),
        object.display().to_string(),
    ])
}

fn env(name: &str) -> Result<String, String> {
    std::env::var(name).map_err(|_| format!("cargo did not set {name}"))
}

/// The toolchain's `gcc-ld` directory, whose `ld.lld` runs `rust-lld`.
fn lld_wrapper_dir(rustc: &str, host: &str) -> Result<PathBuf, String> {
    let out = Command::new(rustc)
        .args(["--print", "sysroot"])
        .output()
        .map_err(|e| format!("running {rustc} --print sysroot: {e}"))?;
    let sysroot = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let dir = Path::new(&sysroot)
        .join("lib/rustlib")
        .join(host)
        .join("bin/gcc-ld");
    if dir.join("ld.lld").is_file() {
        Ok(dir)
    } else {
        Err(format!(
            "the toolchain has no rust-lld ({} is missing); GNU ld cannot add named \
             versions to a Rust cdylib",
            dir.join("ld.lld").display()
        ))
    }
}

/// The generated crate: one `global_asm!` that names the versioned symbols.
fn versions_source(exports: &[symbols::Export], arch: &str) -> Result<String, String> {
    let (jump, func_type, obj_type, options) = match arch {
        "x86_64" => (
            "jmp {}@PLT",
            "@function",
            "@object",
            ", options(att_syntax)",
        ),
        "aarch64" => ("b {}", "%function", "%object", ""),
        _ => return Err(format!("no jump stub written for {arch}")),
    };
    let mut asm = String::new();
    for e in exports {
        let v = e.versioned_name();
        let target = match e.target {
            // An undefined reference is enough: LLD gives the crate's definition of the
            // name this version.
            symbols::Target::Crate if e.default => {
                writeln!(asm, ".globl \"{v}\"").unwrap();
                continue;
            }
            symbols::Target::Crate => e.name.clone(),
            symbols::Target::Stub(kind) => match kind.function() {
                Some(f) => f.to_string(),
                None => {
                    writeln!(asm, ".data\n.globl \"{v}\"\n.type \"{v}\", {obj_type}").unwrap();
                    writeln!(asm, ".size \"{v}\", 1\n\"{v}\":\n.byte 0").unwrap();
                    continue;
                }
            },
        };
        writeln!(
            asm,
            ".text\n.p2align 4\n.globl \"{v}\"\n.type \"{v}\", {func_type}"
        )
        .unwrap();
        writeln!(asm, "\"{v}\":\n{}", jump.replace("{}", &target)).unwrap();
        writeln!(asm, ".size \"{v}\", . - \"{v}\"").unwrap();
    }
    Ok(format!(
        "// Generated by vqp-softverbs' build.rs from libibverbs.map.\n#![no_std]\n\
         core::arch::global_asm!(r#\"\n{asm}\"#{options});\n"
    ))
}
