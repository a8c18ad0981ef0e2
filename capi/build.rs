//! Gives the shared library the SONAME `libvqp.so.0` (ABI major version 0), whatever
//! file name cargo writes it under; `install.sh` installs it as `libvqp.so.0.x.y`.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    if os == "linux" {
        println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libvqp.so.0");
    }
}
