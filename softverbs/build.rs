//! Marks the cdylib `-z nodelete`: the provider's background progress thread and its
//! thread-locals must never see their code unmapped by a `dlclose`.
fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-z,nodelete");
    println!("cargo:rerun-if-changed=build.rs");
}
