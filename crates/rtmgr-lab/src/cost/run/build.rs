//! The macro benchmark (McKenney §2.2 Table 1, where a kernel build was timed):
//! a real Rust code base that is already on the machine — a crate from
//! Cargo's unpacked registry sources, present once any workspace using it has
//! been built — compiled from clean with `cargo build --offline` into a
//! private target directory, `-j` = the CPUs the configuration leaves to
//! Linux tasks. No download at run time.

use crate::experiment::{bad_input, Error, Result};
use crate::measure::which;
use std::path::{Path, PathBuf};

/// A build ready to run: a one-line wrapper package depending on the crate,
/// in a private directory removed on drop.
pub struct BuildSource {
    dir: PathBuf,
    cargo: PathBuf,
    /// "regex-syntax 0.8.11".
    pub label: String,
}

/// Cargo's home: $CARGO_HOME, else ~/.cargo.
fn cargo_home() -> Option<PathBuf> {
    std::env::var_os("CARGO_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cargo")))
}

/// Versions of `name` unpacked under `registry/src/*/`, highest last.
fn versions(home: &Path, name: &str) -> Vec<String> {
    let mut found = Vec::new();
    let Ok(indexes) = std::fs::read_dir(home.join("registry/src")) else {
        return found;
    };
    for index in indexes.flatten() {
        for e in std::fs::read_dir(index.path())
            .into_iter()
            .flatten()
            .flatten()
        {
            let file = e.file_name().to_string_lossy().into_owned();
            if let Some(v) = file.strip_prefix(&format!("{name}-")) {
                if v.starts_with(|c: char| c.is_ascii_digit()) {
                    found.push(v.to_string());
                }
            }
        }
    }
    found.sort_by_key(|v| version_key(v));
    found.dedup();
    found
}

/// "0.8.11" → [0, 8, 11] (pre-release suffixes sort with their base).
pub fn version_key(v: &str) -> Vec<u64> {
    v.split(['.', '-', '+'])
        .map_while(|p| p.parse::<u64>().ok())
        .collect()
}

/// `name` or `name@version`.
pub fn parse_spec(spec: &str) -> (String, Option<String>) {
    match spec.split_once('@') {
        Some((n, v)) => (n.to_string(), Some(v.to_string())),
        None => (spec.to_string(), None),
    }
}

/// The wrapper package's manifest.
pub fn manifest(name: &str, version: &str) -> String {
    format!(
        "[package]\nname = \"rtmgr-cost-build\"\nversion = \"0.0.0\"\nedition = \"2021\"\npublish = false\n\n[dependencies]\n{name} = \"={version}\"\n\n[workspace]\n"
    )
}

impl BuildSource {
    /// Find the crate (`name` or `name@version`) and write the wrapper package.
    pub fn prepare(spec: &str, scratch: &Path) -> Result<BuildSource> {
        let Some(cargo) = which("cargo") else {
            return bad_input(
                "the build benchmark needs cargo on PATH (or leave `build` out of --only)",
            );
        };
        let (name, want) = parse_spec(spec);
        let home = cargo_home().unwrap_or_default();
        let have = versions(&home, &name);
        let version = match want {
            Some(v) if have.contains(&v) => v,
            None if !have.is_empty() => have.last().cloned().unwrap_or_default(),
            _ => {
                return bad_input(format!(
                    "--build-crate {spec}: not unpacked under {}/registry/src (found versions: {}); build a workspace that uses it first, or name another crate",
                    home.display(),
                    if have.is_empty() { "none".to_string() } else { have.join(", ") }
                ))
            }
        };
        let dir = scratch.join("build");
        let io = |e| Error::io(format!("write the build package in {}", dir.display()), e);
        std::fs::create_dir_all(dir.join("src")).map_err(io)?;
        std::fs::write(dir.join("Cargo.toml"), manifest(&name, &version)).map_err(io)?;
        std::fs::write(dir.join("src/lib.rs"), "").map_err(io)?;
        Ok(BuildSource {
            dir,
            cargo,
            label: format!("{name} {version}"),
        })
    }

    pub fn program(&self) -> &Path {
        &self.cargo
    }

    fn target(&self) -> PathBuf {
        self.dir.join("target")
    }

    /// The command without -j (for the report).
    pub fn command(&self) -> Vec<String> {
        vec![
            "cargo".into(),
            "build".into(),
            "--offline".into(),
            "--manifest-path".into(),
            self.dir.join("Cargo.toml").display().to_string(),
            "--target-dir".into(),
            self.target().display().to_string(),
        ]
    }

    /// Arguments of one clean build with `jobs` parallel jobs; removes the
    /// previous build's output first.
    pub fn clean_args(&self, jobs: usize) -> Result<Vec<String>> {
        match std::fs::remove_dir_all(self.target()) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(Error::io("remove the previous build", e)),
        }
        let mut args: Vec<String> = self.command().into_iter().skip(1).collect();
        args.extend(["-j".into(), jobs.max(1).to_string()]);
        Ok(args)
    }
}

impl Drop for BuildSource {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_versions_and_manifest() {
        assert_eq!(parse_spec("regex-syntax"), ("regex-syntax".into(), None));
        assert_eq!(
            parse_spec("syn@2.0.1"),
            ("syn".into(), Some("2.0.1".into()))
        );
        assert!(version_key("0.8.11") > version_key("0.8.9"));
        assert_eq!(version_key("1.0.0-rc.1"), vec![1, 0, 0]);
        let m = manifest("regex-syntax", "0.8.11");
        assert!(m.contains("regex-syntax = \"=0.8.11\"") && m.contains("[workspace]"));
    }

    #[test]
    fn finds_unpacked_versions_highest_last() {
        let home = tempfile::tempdir().unwrap();
        let idx = home.path().join("registry/src/index.example");
        for d in ["foo-0.9.0", "foo-0.10.1", "foo-bar-1.0.0", "foo-0.10.0"] {
            std::fs::create_dir_all(idx.join(d)).unwrap();
        }
        assert_eq!(
            versions(home.path(), "foo"),
            vec!["0.9.0", "0.10.0", "0.10.1"]
        );
        assert!(versions(home.path(), "absent").is_empty());
    }
}
