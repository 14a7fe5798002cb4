#!/usr/bin/env python3
"""The committed simulated lbµ results (bench/results/lb-sim-*.json) and the
tables of docs/balance.md made from them; used by bench/regenerate.sh.

  lb_sim_results.py strip REPORT OUT   # `rtmgr lb --json` report -> OUT without
                                       # the timing fields (this machine's speed)
  lb_sim_results.py tables DOC DIR     # rewrite DOC's generated tables from DIR
"""
import json
import re
import sys

# Per run, the fields that depend on the machine, not on the simulation.
TIMING = ("wall_s", "events_per_s")


def strip(report_path, out_path):
    with open(report_path) as f:
        rep = json.load(f)
    for run in rep["runs"]:
        if run.get("mode") != "sim":
            sys.exit(f"{report_path}: not a simulated run ({run.get('balancer')})")
        for k in TIMING:
            run.pop(k, None)
    with open(out_path, "w") as f:
        json.dump(rep, f, indent=2, ensure_ascii=False)
        f.write("\n")


def secs(ns):
    return "-" if ns is None else f"{ns / 1e9:.2f}"


def us(ns):
    return "-" if ns is None else f"{ns / 1e3:.1f}"


def table(rep):
    rows = [
        "| balancer | completion min–max (s) | max/min | RT0 p99 / max (µs) | migrations | ping-pongs |",
        "|---|---|---|---|---|---|",
    ]
    for run in rep["runs"]:
        r = run["report"]
        lat = r["rt0_latency"]
        spread = r.get("completion_spread")
        unfinished = r.get("unfinished", 0)
        rows.append(
            f"| {run['balancer']} | {secs(r.get('completion_min_ns'))}–{secs(r.get('completion_max_ns'))}"
            f"{f' ({unfinished} unfinished)' if unfinished else ''} | "
            f"{'-' if spread is None else f'{spread:.3f}'} | "
            f"{us(lat.get('p99_ns'))} / {us(lat.get('max_ns'))} | "
            f"{r['migrations']} | {r['pingpongs']} |"
        )
    return "\n".join(rows)


# <!-- generated from bench/results/NAME.json by bench/regenerate.sh --> ... <!-- end NAME.json -->
BLOCK = re.compile(
    r"(<!-- generated from bench/results/(?P<name>[\w.-]+\.json) by bench/regenerate\.sh -->\n)"
    r".*?"
    r"(\n<!-- end (?P=name) -->)",
    re.S,
)


def tables(doc, results_dir):
    with open(doc) as f:
        text = f.read()
    seen = []

    def render(m):
        name = m.group("name")
        seen.append(name)
        with open(f"{results_dir}/{name}") as f:
            return m.group(1) + table(json.load(f)) + m.group(3)

    text = BLOCK.sub(render, text)
    if not seen:
        sys.exit(f"{doc}: no generated table")
    with open(doc, "w") as f:
        f.write(text)


if __name__ == "__main__":
    cmd = sys.argv[1:2]
    if cmd == ["strip"] and len(sys.argv) == 4:
        strip(sys.argv[2], sys.argv[3])
    elif cmd == ["tables"] and len(sys.argv) == 4:
        tables(sys.argv[2], sys.argv[3])
    else:
        sys.exit(__doc__)
