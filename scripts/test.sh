#!/usr/bin/env bash
# The project's test command (README, second line): format, lint, all tests.
# Tests that need root and a real cgroup tree run when root and print why they skip otherwise.
# Everything is built and tested with every cargo feature (rtkit, metrics, manuals: README,
# "Cargo features"); the default build, without them, must lint clean and refuse what it lacks.
set -euo pipefail
cd "$(dirname "$0")/.."
# The rules of docs/architecture.md a script can check: layering, import circles, unsafe, the Host, the CLI (seconds).
python3 scripts/check-architecture.py
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --all-features -- -D warnings
cargo clippy -p rtmgr-linux -p rtmgr --all-targets -- -D warnings
cargo build --workspace --all-targets --all-features
# The committed simulated results and docs/balance.md's tables equal what the code gives (seconds).
RTMGR="${CARGO_TARGET_DIR:-target}/debug/rtmgr" bash bench/regenerate.sh check
cargo test --workspace --all-features --no-fail-fast -- --test-threads=1
cargo test -p rtmgr --test features_cli
