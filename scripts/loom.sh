#!/usr/bin/env bash
# The loom model checks of rtmgr-rt's RT-FIFOs (crates/rtmgr-rt/src/fifo/loom_tests.rs):
# every interleaving of a producer and a consumer. They need `--cfg loom`, which
# rebuilds everything, so they get a target directory of their own. A debug
# build: its cold build takes 1.3 min here against 2.2 min for --release, and
# the models then run in 5 s instead of 2 (CI's 20 minutes, .ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."
RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target}/loom" \
  cargo test -p rtmgr-rt --lib fifo_loom
