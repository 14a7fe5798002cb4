#!/usr/bin/env bash
# The loom model checks of rtmgr-rt's RT-FIFOs (crates/rtmgr-rt/src/fifo/loom_tests.rs):
# every interleaving of a producer and a consumer. They need `--cfg loom`, which
# rebuilds everything, so they get a target directory of their own.
set -euo pipefail
cd "$(dirname "$0")/.."
RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target}/loom" \
  cargo test -p rtmgr-rt --release --lib fifo_loom
