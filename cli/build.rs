//! Link flags for the `sluice` binary.
//!
//! On Linux with glibc, the binary's relative relocations are packed (`DT_RELR`, glibc
//! 2.36 and GNU ld 2.38 or lld 15 on): as plain `RELA` entries they were 2.2 MB that the
//! loader reads in full at every start, a sixth of an idle proxy's resident memory
//! (docs/benchmarks.md, "Idle RSS: packed relocations").
fn main() {
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    let env = std::env::var("CARGO_CFG_TARGET_ENV").unwrap_or_default();
    if os == "linux" && env == "gnu" {
        println!("cargo:rustc-link-arg-bin=sluice=-Wl,-z,pack-relative-relocs");
    }
    println!("cargo:rerun-if-changed=build.rs");
}
