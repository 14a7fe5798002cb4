#!/usr/bin/env bash
# The project's test command (README, second line): format, lint, all tests.
# Tests that need root and a real cgroup tree run when root and print why they skip otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo fmt --all -- --check
cargo clippy --workspace --all-targets -- -D warnings
cargo build --workspace --all-targets
cargo test --workspace --no-fail-fast -- --test-threads=1
