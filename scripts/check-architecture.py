#!/usr/bin/env python3
"""Check the rules of docs/architecture.md that a script can check (issue 29 item 6).

Each check below names the rule it covers, as docs/architecture.md cites it.
Run by scripts/test.sh; standard library only; takes well under a second.
Exit status 0 when every rule holds (known exceptions aside), 1 otherwise,
with one line per violation: `file: rule: what`.
"""

import os
import re
import sys
from collections import defaultdict

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

# Layering between crates (docs/architecture.md "Two products"): the crates each
# crate may depend on, dev-dependencies included. No arrow runs up.
ALLOWED_DEPS = {
    "rtmgr-core": set(),
    "rtmgr-sys": set(),
    "rtmgr-sim": {"rtmgr-core"},
    "rtmgr-linux": {"rtmgr-core", "rtmgr-sys"},
    "rtmgr-rt": {"rtmgr-core", "rtmgr-sys"},
    "rtmgr-lab": {"rtmgr-core", "rtmgr-sys", "rtmgr-linux", "rtmgr-rt"},
    "rtmgr": {"rtmgr-core", "rtmgr-sys", "rtmgr-linux", "rtmgr-lab", "rtmgr-rt", "rtmgr-sim"},
}
UNSAFE_CRATES = {"rtmgr-sys", "rtmgr-rt"}

# Files of rtmgr-linux that open files with std::fs outside host/, for a
# reason that stays (docs/architecture.md "Rules of the design": rtmgr's own
# state, /proc files held open, a program's own file). An entry whose file no
# longer uses std::fs fails the check, so the list only shrinks.
OWN_FILES = {
    "crates/rtmgr-linux/src/journal.rs": "the partition journal: rtmgr's own state file",
    "crates/rtmgr-linux/src/daemon/grants_journal.rs": "the daemon's grant journal: rtmgr's own state file",
    "crates/rtmgr-linux/src/daemon/mod.rs": "the daemon's state directory and socket",
    "crates/rtmgr-linux/src/daemon/startup.rs": "the daemon's state directory and socket",
    "crates/rtmgr-linux/src/host_preemption.rs": "rtmgr's own cache file of the host-preemption figure",
    "crates/rtmgr-linux/src/preload.rs": "the preload library in a memfd, and the program's ELF header",
    "crates/rtmgr-linux/src/resources/knobs.rs": "removes the legacy resources journal once undone",
    "crates/rtmgr-linux/src/balance/procfile.rs": "a /proc file held open and re-read with pread",
    "crates/rtmgr-linux/src/balance/observe/pacing.rs": "lists /proc task directories with a held budget",
    "crates/rtmgr-linux/src/status/kernel.rs": "reads /proc/config.gz as bytes and /proc/pressure",
    "crates/rtmgr-linux/src/daemon/rtkit/rules.rs": "the owner (metadata) of /proc/<pid>",
}

# Known violations, each with the reason it is tolerated, key (rule, file):
# none today. A listed violation that no longer occurs fails the check.
KNOWN_VIOLATIONS = set()

# Words that name the lab's experiments; rtmgr-linux never says them.
EXPERIMENT_WORDS = re.compile(r"(?i)\b(evaluate|experiments?|ablat\w*)\b|rtmgr_lab")
# What makes an engine: threads, clocks and sleeps, RT set-up (the CLI parses,
# calls a library, prints).
ENGINE = re.compile(
    r"\bthread::(spawn|Builder|scope)\b|\brtmgr_sys\b|\bsetup_rt_thread\b|\bsleep_until\b"
)
STD_FS = re.compile(r"\bstd::fs\b|\bstd::\{[^}]*\bfs\b")
UNSAFE = re.compile(r"\bunsafe\b")
# Core and simulator purity: no system call, clock, file, thread, process or network.
IMPURE = re.compile(
    r"\bstd::(fs|thread|process|net|env)\b|\bstd::time::(Instant|SystemTime)\b"
    r"|\b(Instant|SystemTime)::now\b|\brtmgr_sys\b|\blibc::"
)
PURE_CRATES = {"rtmgr-core", "rtmgr-sim"}


TOKEN = re.compile(
    r"(?P<line>//[^\n]*)|(?P<block>/\*)"
    r"|(?P<str>(?<!\w)b?r(?P<hashes>#*)\".*?\"(?P=hashes)|b?\"(?:\\.|[^\"\\])*\")"
    r"|(?P<char>b?'(?:\\x..|\\u\{[0-9a-fA-F]+\}|\\.|[^\\'])')",
    re.S,
)


def blank(text):
    """Return (code, code_with_comments): `text` with comments and string
    literals replaced by spaces (newlines kept), and with only strings blanked."""
    code, com, pos = [], [], 0

    def spaces(s):
        return re.sub(r"[^\n]", " ", s)

    while True:
        m = TOKEN.search(text, pos)
        if not m:
            break
        code.append(text[pos:m.start()])
        com.append(text[pos:m.start()])
        end = m.end()
        if m.group("block"):
            depth = 1
            while end < len(text) and depth:
                if text.startswith("/*", end):
                    depth, end = depth + 1, end + 2
                elif text.startswith("*/", end):
                    depth, end = depth - 1, end + 2
                else:
                    end += 1
        token = text[m.start():end]
        code.append(spaces(token))
        com.append(token if m.group("line") or m.group("block") else spaces(token))
        pos = end
    code.append(text[pos:])
    com.append(text[pos:])
    return "".join(code), "".join(com)


CFG_TEST = re.compile(r"#\[cfg\((test|all\(test[^\]]*|any\(test[^\]]*)\)\]")


def strip_tests(text, code, *others):
    """`code` (and each of `others`, same length) with every `#[cfg(test)]`
    item (module block or function) blanked, and the names of
    `#[cfg(test)] mod x;` children (their files are tests)."""
    outs = [list(t) for t in (code,) + others]
    test_children = set()
    for m in CFG_TEST.finditer(code):
        rest = code[m.end():]
        decl = re.match(r"(\s*#\[[^\]]*\])*\s*(pub(\([^)]*\))?\s+)?mod\s+(\w+)\s*;", rest)
        if decl:
            path = re.search(r'#\[path\s*=\s*"([^"]+)"\]', text[m.end():m.end() + decl.end()])
            test_children.add(path.group(1) if path else decl.group(4))
            continue
        brace = code.find("{", m.end())
        semi = code.find(";", m.end())
        if brace < 0 or (0 <= semi < brace):
            continue
        depth, j = 0, brace
        while j < len(code):
            if code[j] == "{":
                depth += 1
            elif code[j] == "}":
                depth -= 1
                if depth == 0:
                    break
            j += 1
        for out in outs:
            for k in range(m.start(), min(j + 1, len(code))):
                if out[k] != "\n":
                    out[k] = " "
    return ["".join(out) for out in outs], test_children


class SourceFile:
    def __init__(self, crate, src_dir, path):
        self.crate, self.path = crate, path
        self.rel = os.path.relpath(path, ROOT)
        with open(path, encoding="utf-8") as f:
            self.text = f.read()
        code, with_comments = blank(self.text)
        (self.code, self.with_comments), self.test_children = strip_tests(self.text, code, with_comments)
        parts = os.path.relpath(path, src_dir)[:-3].split(os.sep)
        if parts[-1] in ("mod", "lib", "main"):
            parts = parts[:-1]
        self.module = tuple(parts)
        self.is_test = False

    def line_of(self, offset):
        return self.text.count("\n", 0, offset) + 1


def crate_files(crate_dir):
    src = os.path.join(crate_dir, "src")
    files = []
    for d, _, names in os.walk(src):
        for name in sorted(names):
            if name.endswith(".rs"):
                files.append(SourceFile(os.path.basename(crate_dir), src, os.path.join(d, name)))
    by_path = {f.path: f for f in files}
    # Files declared under #[cfg(test)] (or reached through #[path]) are tests.
    for f in files:
        base = os.path.dirname(f.path)
        if not f.path.endswith(("mod.rs", "lib.rs", "main.rs")):
            base = f.path[:-3]
        for child in f.test_children:
            for cand in (os.path.join(base, child), os.path.join(base, child + ".rs"),
                         os.path.join(base, child, "mod.rs"),
                         os.path.join(os.path.dirname(f.path), child)):
                cand = os.path.normpath(cand)
                if cand in by_path:
                    by_path[cand].is_test = True
    # Children of test files are tests too.
    test_modules = {f.module for f in files if f.is_test}
    for f in files:
        if any(f.module[:k] in test_modules for k in range(len(f.module))):
            f.is_test = True
    return files


PATH_REF = re.compile(r"\b(crate|super|self)((?:\s*::\s*(?:super|\w+))+)")
USE_GROUP = re.compile(r"\buse\s+(crate|super|self)((?:\s*::\s*(?:super|\w+))*)\s*::\s*\{")


def referenced_modules(f, modules):
    """Modules of f's crate that f's production code names by path."""
    refs = set()
    spans = [(m.group(1), m.group(2)) for m in PATH_REF.finditer(f.code)]
    # `use crate::a::{b, c::d}`: each item of the group continues the path.
    for m in USE_GROUP.finditer(f.code):
        depth, j = 1, m.end()
        while j < len(f.code) and depth:
            depth += {"{": 1, "}": -1}.get(f.code[j], 0)
            j += 1
        for item in re.findall(r"(?:^|[{,])\s*(\w+)", f.code[m.end():j - 1]):
            spans.append((m.group(1), m.group(2) + "::" + item))
    for head, tail in spans:
        segs = [s for s in re.split(r"\s*::\s*", tail.strip()) if s]
        base = list(f.module) if head != "crate" else []
        if head == "super":
            base = base[:-1]
        for s in segs:
            if s == "super":
                base = base[:-1]
                continue
            base.append(s)
        # The deepest module of the crate this path names.
        for k in range(len(base), -1, -1):
            if tuple(base[:k]) in modules:
                refs.add(tuple(base[:k]))
                break
    return refs


def find_cycles(graph):
    """Strongly connected components with more than one node."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def check_circles(crate, files, report):
    """Inside a crate, no two modules (files) import each other, directly or
    round a circle. A module's use of its ancestors' or descendants' items is
    containment, not an import between two modules, and is not counted."""
    modules = {f.module for f in files}
    graph = defaultdict(set)
    for f in files:
        if f.is_test:
            continue
        for target in referenced_modules(f, modules):
            a, b = f.module, target
            k = min(len(a), len(b))
            if a[:k] != b[:k]:
                graph[a].add(b)
    src = os.path.join("crates", crate, "src")
    for comp in find_cycles(graph):
        names = ["::".join(m) or "crate" for m in comp]
        where = os.path.join(src, *os.path.commonprefix([list(m) for m in comp]))
        report("import circle", where, "modules " + " <-> ".join(names) + " import each other")


def check_pattern(files, rule, pattern, report, with_comments=False, allowed=()):
    for f in files:
        if f.is_test or f.rel in allowed:
            continue
        text = f.with_comments if with_comments else f.code
        hits = [f.line_of(m.start()) for m in pattern.finditer(text)]
        if hits:
            report(rule, f.rel, "line " + ", ".join(map(str, sorted(set(hits))[:8])))


MAX_LINES = 600


def check_module_heads(files, report):
    """Each module opens with a few `//!` lines saying what it is for and
    which seed section it implements, and stays small (tests aside)."""
    for f in files:
        if f.is_test:
            continue
        if not f.text.lstrip().startswith("//!"):
            report("module without its //! opening", f.rel, "add what it is for and its seed section")
        lines = f.text.count("\n")
        if lines > MAX_LINES:
            report("module too long", f.rel, f"{lines} lines (at most {MAX_LINES}): split it")


UNSAFE_USE = re.compile(r"\bunsafe\s*\{|\bunsafe\s+impl\b")


def check_safety_comments(files, report):
    """In the crates allowed unsafe, each block and impl says why it is sound:
    a `// SAFETY:` comment on its line or in the five lines above."""
    for f in files:
        lines = f.text.split("\n")
        for m in UNSAFE_USE.finditer(f.code):
            n = f.line_of(m.start())
            if not any("SAFETY:" in line for line in lines[max(0, n - 6):n]):
                report("unsafe without a SAFETY comment", f.rel, f"line {n}")


def cargo_deps(crate_dir):
    """rtmgr-* crates named in any dependency table of the crate's Cargo.toml."""
    deps, table = set(), None
    with open(os.path.join(crate_dir, "Cargo.toml"), encoding="utf-8") as f:
        for line in f:
            s = line.strip()
            if s.startswith("["):
                table = s
                continue
            m = re.match(r"(rtmgr(?:-\w+)?)\s*(\.|=)", s)
            if table and "dependencies" in table and m:
                deps.add(m.group(1))
    return deps


def main():
    violations, excused = [], []

    def report(rule, where, what):
        line = f"{where}: {rule}: {what}"
        (excused if (rule, where) in KNOWN_VIOLATIONS else violations).append(line)

    crates_dir = os.path.join(ROOT, "crates")
    crates = sorted(d for d in os.listdir(crates_dir) if os.path.isfile(os.path.join(crates_dir, d, "Cargo.toml")))
    for crate in crates:
        cdir = os.path.join(crates_dir, crate)
        rel_toml = os.path.join("crates", crate, "Cargo.toml")
        if crate not in ALLOWED_DEPS:
            report("layering", rel_toml, "crate missing from the layering (docs/architecture.md)")
            continue
        for dep in sorted(cargo_deps(cdir) - ALLOWED_DEPS[crate] - {crate}):
            report("arrow up", rel_toml, f"{crate} depends on {dep}")
        with open(os.path.join(cdir, "Cargo.toml"), encoding="utf-8") as t:
            forbids = re.search(r'unsafe_code\s*=\s*"forbid"', t.read())
        if crate not in UNSAFE_CRATES and not forbids:
            report("unsafe", rel_toml, 'no `[lints.rust] unsafe_code = "forbid"`')
        files = crate_files(cdir)
        check_circles(crate, files, report)
        check_module_heads(files, report)
        if crate not in UNSAFE_CRATES:
            check_pattern(files, "unsafe", UNSAFE, report)
        else:
            check_safety_comments(files, report)
        if crate in PURE_CRATES:
            check_pattern(files, "pure crate touches the OS", IMPURE, report)
        if crate == "rtmgr-linux":
            host = os.path.join("crates", "rtmgr-linux", "src", "host") + os.sep
            check_pattern([f for f in files if not f.rel.startswith(host)], "std::fs outside host/",
                          STD_FS, report, allowed=OWN_FILES)
            by_rel = {f.rel: f for f in files}
            for rel in sorted(OWN_FILES):
                if rel not in by_rel or not STD_FS.search(by_rel[rel].code):
                    report("std::fs outside host/", rel, "listed in OWN_FILES without std::fs: remove it")
            check_pattern([f for f in files if not f.rel.endswith("src/lib.rs")],
                          "rtmgr-linux knows experiments", EXPERIMENT_WORDS, report, with_comments=True)
        if crate == "rtmgr":
            check_pattern(files, "engine in the CLI", ENGINE, report)
    stale = {k for k in KNOWN_VIOLATIONS if not any(e.startswith(f"{k[1]}: {k[0]}:") for e in excused)}
    for rule, where in sorted(stale):
        violations.append(f"{where}: {rule}: listed as a known violation but fixed: remove it from KNOWN_VIOLATIONS")
    for line in excused:
        print("known (being fixed):", line)
    for line in violations:
        print(line)
    if violations:
        print(f"check-architecture: {len(violations)} violation(s) of docs/architecture.md", file=sys.stderr)
        return 1
    print(f"check-architecture: ok ({len(crates)} crates; {len(excused)} known violation(s) listed)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
