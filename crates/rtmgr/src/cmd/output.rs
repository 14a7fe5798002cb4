//! Where a command's report and plots go: where `--out`/`--json`/`--svg` say,
//! plots beside their JSON report, and without any of them into a fresh
//! directory under the user's state directory — never into the current
//! directory unasked; and the file writers every command uses.

use anyhow::{Context, Result};
use std::path::{Path, PathBuf};

/// Where a measuring command writes its report and plots.
#[derive(clap::Args, Clone, Debug)]
pub struct OutArgs {
    /// Directory for report.json and the plots (default: a new directory under
    /// $XDG_STATE_HOME/rtmgr/reports, printed at the end).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Where to write the JSON report (schema: docs/report-schema.md).
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Where to write the SVG plot(s) (default: beside the JSON report); extra plots get a suffix.
    #[arg(long)]
    pub svg: Option<PathBuf>,
    /// Also print the JSON report on stdout after the table.
    #[arg(long)]
    pub print_json: bool,
}

/// Write the report and its plots (`svgs`: suffix, SVG text) where `out`
/// says; print the JSON if asked.
pub fn write_report(
    out: &OutArgs,
    kind: &str,
    report: &impl serde::Serialize,
    svgs: &[(&str, String)],
) -> anyhow::Result<()> {
    let paths = paths(
        kind,
        out.out.as_deref(),
        out.json.as_deref(),
        out.svg.as_deref(),
    );
    write_json(&paths.json, report)?;
    eprintln!("report: {}", paths.json.display());
    for (suffix, text) in svgs {
        let p = with_suffix(&paths.svg, suffix);
        write_file(&p, text)?;
        eprintln!("plot: {}", p.display());
    }
    if out.print_json {
        println!("{}", serde_json::to_string_pretty(report)?);
    }
    Ok(())
}

/// `$XDG_STATE_HOME/rtmgr/reports/<kind>-<UTC time>` (`~/.local/state/…` when
/// XDG_STATE_HOME is unset; /var/tmp/rtmgr/reports/… without a home).
pub fn default_dir(kind: &str) -> PathBuf {
    let base = std::env::var_os("XDG_STATE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .filter(|v| !v.is_empty())
                .map(|h| Path::new(&h).join(".local/state"))
        })
        .map(|b| b.join("rtmgr/reports"))
        .unwrap_or_else(|| PathBuf::from("/var/tmp/rtmgr/reports"));
    base.join(format!("{kind}-{}", stamp(std::time::SystemTime::now())))
}

/// "20261123-101500" (UTC): sorts by time, safe in any file name.
fn stamp(t: std::time::SystemTime) -> String {
    humantime::format_rfc3339_seconds(t)
        .to_string()
        .chars()
        .filter(|c| c.is_ascii_digit() || *c == 'T')
        .map(|c| if c == 'T' { '-' } else { c })
        .collect()
}

/// The files of one report: the JSON and the stem its plots are named from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Paths {
    pub json: PathBuf,
    /// Plots are this path with a suffix before `.svg`.
    pub svg: PathBuf,
}

/// `--json`/`--svg` win; else `--out DIR`; else a fresh default directory.
/// Plots without `--svg` go beside the JSON report.
pub fn paths(kind: &str, out: Option<&Path>, json: Option<&Path>, svg: Option<&Path>) -> Paths {
    let dir = || {
        out.map(Path::to_path_buf)
            .unwrap_or_else(|| default_dir(kind))
    };
    let json = json
        .map(Path::to_path_buf)
        .unwrap_or_else(|| dir().join("report.json"));
    let svg = svg.map(Path::to_path_buf).unwrap_or_else(|| {
        let name = if json.file_name().is_some_and(|n| n == "report.json") {
            format!("{kind}.svg")
        } else {
            let stem = json.file_stem().map(|s| s.to_string_lossy().into_owned());
            format!("{}.svg", stem.unwrap_or_else(|| kind.into()))
        };
        json.with_file_name(name)
    });
    Paths { json, svg }
}

pub fn write_file(path: &Path, text: &str) -> Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
    }
    std::fs::write(path, text).with_context(|| format!("write {}", path.display()))
}

pub fn write_json(path: &Path, report: &impl serde::Serialize) -> Result<()> {
    write_file(path, &(serde_json::to_string_pretty(report)? + "\n"))
}

/// Path with a suffix before the extension: a.svg + "-pct" → a-pct.svg.
pub fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let ext = path
        .extension()
        .map(|e| format!(".{}", e.to_string_lossy()))
        .unwrap_or_default();
    path.with_file_name(format!("{stem}{suffix}{ext}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plots_follow_the_json_and_nothing_lands_in_the_current_directory() {
        let p = paths("latency", None, Some(Path::new("/r/a.json")), None);
        assert_eq!(p.svg, Path::new("/r/a.svg"));
        let p = paths("latency", Some(Path::new("/o")), None, None);
        assert_eq!(p.json, Path::new("/o/report.json"));
        assert_eq!(p.svg, Path::new("/o/latency.svg"));
        let p = paths("exec", None, None, Some(Path::new("x.svg")));
        assert_eq!(p.svg, Path::new("x.svg"));
        assert!(p.json.is_absolute(), "{:?}", p.json);
        assert!(p.json.to_string_lossy().contains("rtmgr/reports/exec-"));
    }

    #[test]
    fn stamps_are_digits() {
        let t = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_795_000_000);
        assert_eq!(stamp(t), "20261118-110640");
    }

    #[test]
    fn suffixes() {
        assert_eq!(
            with_suffix(Path::new("d/a.svg"), "-pct"),
            Path::new("d/a-pct.svg")
        );
        assert_eq!(with_suffix(Path::new("a"), "-x"), Path::new("a-x"));
    }
}
