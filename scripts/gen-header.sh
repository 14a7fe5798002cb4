#!/usr/bin/env bash
# Regenerate include/rtmgr.h from crates/rtmgr-rt with cbindgen (config:
# crates/rtmgr-rt/cbindgen.toml). The test `c_api` checks that the checked-in
# header matches; this runs that test in "update" mode.
set -euo pipefail
cd "$(dirname "$0")/.."
RTMGR_UPDATE_HEADER=1 cargo test -q -p rtmgr-rt --test c_api -- header --exact --nocapture
