//! The C API as a C program sees it: include/rtmgr.h must be exactly what
//! cbindgen generates from the crate, and the C example and C test must build
//! with `cc -std=c11 -Wall -Wextra -Werror` against the installed header and
//! pkg-config file, link statically and dynamically, and run.

use std::path::{Path, PathBuf};
use std::process::Command;

fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn repo_root() -> PathBuf {
    crate_dir().join("../..").canonicalize().unwrap()
}

/// Fails when include/rtmgr.h is stale; `RTMGR_UPDATE_HEADER=1` (used by
/// `bash scripts/gen-header.sh`) rewrites it instead.
#[test]
fn header() {
    let config = cbindgen::Config::from_file(crate_dir().join("cbindgen.toml")).unwrap();
    let mut generated = Vec::new();
    cbindgen::Builder::new()
        .with_crate(crate_dir())
        .with_config(config)
        .generate()
        .expect("cbindgen failed")
        .write(&mut generated);
    let path = repo_root().join("include/rtmgr.h");
    if std::env::var_os("RTMGR_UPDATE_HEADER").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, &generated).unwrap();
        println!("wrote {}", path.display());
        return;
    }
    let checked_in = std::fs::read(&path).unwrap_or_default();
    assert!(
        checked_in == generated,
        "include/rtmgr.h differs from what cbindgen generates: run `bash scripts/gen-header.sh`"
    );
}

/// The directory holding librtmgr_rt.{a,so} built alongside this test.
fn lib_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent().unwrap();
    for d in [deps, deps.parent().unwrap()] {
        if d.join("librtmgr_rt.a").exists() && d.join("librtmgr_rt.so").exists() {
            return d.to_path_buf();
        }
    }
    panic!("librtmgr_rt.a/.so not found next to {}", exe.display());
}

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn pkg_config(prefix: &Path, args: &[&str]) -> Vec<String> {
    let out = run(Command::new("pkg-config")
        .args(args)
        .arg("rtmgr-rt")
        .env("PKG_CONFIG_PATH", prefix.join("lib/pkgconfig")));
    out.split_whitespace().map(str::to_owned).collect()
}

#[test]
fn c_programs_build_link_and_run() {
    let tmp = tempfile::tempdir().unwrap();
    let prefix = tmp.path().join("prefix");
    run(Command::new("bash")
        .arg(repo_root().join("scripts/install-c.sh"))
        .arg("--prefix")
        .arg(&prefix)
        .arg("--libs-from")
        .arg(lib_dir()));
    let cflags = pkg_config(&prefix, &["--cflags"]);
    let shared_libs = pkg_config(&prefix, &["--libs"]);
    let static_libs: Vec<String> = pkg_config(&prefix, &["--libs-only-l", "--static"])
        .into_iter()
        .filter(|l| l != "-lrtmgr_rt")
        .collect();
    let strict = ["-std=c11", "-Wall", "-Wextra", "-Werror", "-O1"];
    for prog in ["fifo_test", "fifo_example"] {
        let src = repo_root().join(format!("examples/c/{prog}.c"));
        let exe_static = tmp.path().join(format!("{prog}-static"));
        run(Command::new("cc")
            .args(strict)
            .args(&cflags)
            .arg(&src)
            .arg(prefix.join("lib/librtmgr_rt.a"))
            .args(&static_libs)
            .arg("-o")
            .arg(&exe_static));
        let exe_shared = tmp.path().join(format!("{prog}-shared"));
        run(Command::new("cc")
            .args(strict)
            .args(&cflags)
            .arg(&src)
            .args(&shared_libs)
            .arg(format!("-Wl,-rpath,{}", prefix.join("lib").display()))
            .arg("-o")
            .arg(&exe_shared));
        for exe in [&exe_static, &exe_shared] {
            // cargo's LD_LIBRARY_PATH would win over the rpath: drop it.
            let out = run(Command::new(exe).arg("20000").env_remove("LD_LIBRARY_PATH"));
            println!("{}: {}", exe.display(), out.trim());
        }
    }
    // The shared build really uses the shared library.
    let ldd = run(Command::new("ldd")
        .arg(tmp.path().join("fifo_test-shared"))
        .env_remove("LD_LIBRARY_PATH"));
    let want = prefix.join("lib/librtmgr_rt.so");
    assert!(ldd.contains(&*want.to_string_lossy()), "{ldd}");
}
