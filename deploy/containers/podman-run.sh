#!/usr/bin/env bash
# A podman container asking the host's rtmgr for a reservation through the
# bind-mounted socket (docs/containers.md). Run from the repository on a
# host where `rtmgr serve` runs with a [[client]] rule for the uid the
# container's process has on the host: --user 1000:1000 with rootful
# podman; with rootless podman, the uid of the user running podman (its
# container root maps to it). The image needs only Python 3.
#   bash deploy/containers/podman-run.sh [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/../.."
exec podman run --rm --user 1000:1000 \
  -v /run/rtmgr/rtmgr.sock:/run/rtmgr/rtmgr.sock \
  -v "$PWD/deploy/containers/rt_worker.py:/opt/rt-worker/rt_worker.py:ro,z" \
  -v "$PWD/crates/rtmgr/tests/conformance/rtmgr_client.py:/opt/rt-worker/rtmgr_client.py:ro,z" \
  docker.io/library/python:3.11-slim \
  python3 /opt/rt-worker/rt_worker.py --class rt1:20 --seconds "${1:-10}"
