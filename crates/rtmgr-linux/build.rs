//! Builds the `--mlock` LD_PRELOAD library (preload/mlock.rs) with the same
//! rustc and embeds it in rtmgr-linux, so the rtmgr binary is self-contained.
use std::path::PathBuf;
use std::process::Command;

fn main() {
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR"));
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let target = std::env::var("TARGET").expect("TARGET");
    let so = out.join("librtmgr_mlock.so");
    println!("cargo:rerun-if-changed=preload/mlock.rs");
    let status = Command::new(rustc)
        .args([
            "--crate-type",
            "cdylib",
            "--edition",
            "2021",
            "-C",
            "panic=abort",
            "-C",
            "opt-level=2",
            "-C",
            "strip=symbols",
        ])
        .args(["--target", &target])
        .arg("preload/mlock.rs")
        .arg("-o")
        .arg(&so)
        .status()
        .expect("run rustc for the mlock preload library");
    assert!(status.success(), "building preload/mlock.rs failed");
}
