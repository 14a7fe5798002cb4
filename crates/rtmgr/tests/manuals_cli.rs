//! Manuals through the binary: `rtmgr __gen-man DIR` writes a man page for every
//! subcommand that `--help` lists, at any depth (found here by walking the help
//! output, not the generator's own tree); `rtmgr completions SHELL` prints a
//! non-empty script naming every visible subcommand and no hidden one. The man
//! pages need the cargo feature `manuals` (features_cli.rs: the error without it).

use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_rtmgr");

fn rtmgr(args: &[&str]) -> Output {
    let out = Command::new(BIN).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "rtmgr {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// The subcommands `rtmgr PATH --help` lists under "Commands:", without `help`.
fn listed_subcommands(path: &[String]) -> Vec<String> {
    let mut args: Vec<&str> = path.iter().map(String::as_str).collect();
    args.push("--help");
    let help = String::from_utf8(rtmgr(&args).stdout).unwrap();
    help.lines()
        .skip_while(|l| l.trim_end() != "Commands:")
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .filter(|name| name != "help")
        .collect()
}

/// Every subcommand path below the top, depth first: `["partition", "apply"]`, ….
#[cfg(feature = "manuals")]
fn all_subcommand_paths() -> Vec<Vec<String>> {
    let mut found = Vec::new();
    let mut todo = vec![Vec::new()];
    while let Some(path) = todo.pop() {
        for name in listed_subcommands(&path) {
            let mut child = path.clone();
            child.push(name);
            found.push(child.clone());
            todo.push(child);
        }
    }
    found
}

#[cfg(feature = "manuals")]
#[test]
fn a_man_page_for_every_subcommand() {
    let dir = tempfile::tempdir().unwrap();
    rtmgr(&["__gen-man", dir.path().to_str().unwrap()]);
    let paths = all_subcommand_paths();
    assert!(paths.len() >= 10, "too few subcommands found: {paths:?}");
    let names = std::iter::once("rtmgr".to_string())
        .chain(paths.iter().map(|p| format!("rtmgr-{}", p.join("-"))));
    for name in names {
        let page = dir.path().join(format!("{name}.1"));
        let text =
            std::fs::read_to_string(&page).unwrap_or_else(|e| panic!("{}: {e}", page.display()));
        assert!(text.contains(&format!(".TH {name} 1")), "{name}: {text}");
        assert!(text.contains(".SH SYNOPSIS"), "{name}: {text}");
    }
    let written = std::fs::read_dir(dir.path()).unwrap().count();
    assert_eq!(written, paths.len() + 1, "pages for hidden subcommands?");
}

#[test]
fn completions_name_every_visible_subcommand() {
    let top = listed_subcommands(&[]);
    for shell in ["bash", "zsh", "fish"] {
        let script = String::from_utf8(rtmgr(&["completions", shell]).stdout).unwrap();
        for name in &top {
            assert!(script.contains(name.as_str()), "{shell}: no {name}");
        }
    }
}

/// What bash, with the generated script loaded, offers after `rtmgr WORDS… <TAB>`.
fn bash_offers(words: &[&str]) -> Vec<String> {
    let script = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(script.path(), rtmgr(&["completions", "bash"]).stdout).unwrap();
    let line = format!("rtmgr {} ''", words.join(" "));
    let cmd = format!(
        "source {}; COMP_WORDS=({line}); COMP_CWORD={n}; _rtmgr rtmgr '' {prev}; printf '%s\\n' \"${{COMPREPLY[@]}}\"",
        script.path().display(),
        n = words.len() + 1,
        prev = words.last().unwrap_or(&"rtmgr"),
    );
    let out = Command::new("bash").args(["-c", &cmd]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut offered: Vec<String> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .filter(|w| !w.starts_with('-'))
        .map(str::to_string)
        .collect();
    offered.sort();
    offered
}

#[test]
fn bash_completes_the_listed_subcommands_and_no_hidden_one() {
    for path in [vec![], vec!["partition".to_string()]] {
        let mut listed = listed_subcommands(&path);
        listed.push("help".into());
        listed.sort();
        let words: Vec<&str> = path.iter().map(String::as_str).collect();
        assert_eq!(bash_offers(&words), listed, "rtmgr {words:?} <TAB>");
    }
}

#[cfg(feature = "manuals")]
#[test]
fn gen_man_refuses_a_missing_directory() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope");
    let out = Command::new(BIN)
        .args(["__gen-man", missing.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}
