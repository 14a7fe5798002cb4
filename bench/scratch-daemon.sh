# A scratch `rtmgr serve` for the benchmarks (sourced, not run): started on
# $STATE/rtmgr.toml with its state under $STATE/state and its log in
# $OUT/serve.log; stopped with SIGTERM, its partition reset from the journal
# if it left one, $STATE removed. Needs RTMGR, STATE, OUT; the caller holds
# the machine lock on fd 9 (RTMGR_LOCK_HELD=1 tells rtmgr so).
export RTMGR_LOCK_HELD=1
DPID=

# The scratch daemon's config in $STATE/rtmgr.toml: RT CPU $RT_CPU, balancer
# off, a root rule without rate limit; its grant worker on or off ($1,
# default on), its metrics at $METRICS_ADDR when set, more [serve] lines
# from $SERVE_EXTRA (e.g. "reconcile_ms = 60000"); FAVORDYNMODS=1 sets
# `favordynmods = true` (cgroup2's mount option for the daemon's lifetime;
# on kernels from 6.18 the per-threadgroup rwsem it switches on stays until
# reboot).
write_scratch_config() {
  mkdir -p "$STATE"
  chmod 755 "$STATE"
  cat > "$STATE/rtmgr.toml" <<CFG
rt_cpus = "$RT_CPU"
$([ "${FAVORDYNMODS:-0}" = 1 ] && echo "favordynmods = true")
[serve]
state_dir = "$STATE/state"
balancer = false
grant_worker = $([ "${1:-on}" = on ] && echo true || echo false)
$([ -n "${METRICS_ADDR:-}" ] && echo "metrics = \"$METRICS_ADDR\"")
${SERVE_EXTRA:-}
[[client]]
users = ["root"]
max_priority = 98
max_reservations = 256
requests_per_burst = 1000000
burst_s = 1
CFG
}

start_scratch_daemon() {
  "$RTMGR" serve --config "$STATE/rtmgr.toml" 9>&- 2>"$OUT/serve.log" &
  DPID=$!
  local sock=$STATE/state/rtmgr.sock
  for _ in $(seq 200); do [ -S "$sock" ] && return 0; sleep 0.05; done
  echo "rtmgr serve did not listen: $(cat "$OUT/serve.log")" >&2
  exit 1
}

stop_scratch_daemon() {
  if [ -n "$DPID" ]; then
    kill -TERM "$DPID" 2>/dev/null || true
    wait "$DPID" || echo "rtmgr serve exited $? (log: $OUT/serve.log)" >&2
    DPID=
  fi
  if [ -e "$STATE/state/journal.jsonl" ] || [ -e "$STATE/state/grants.jsonl" ]; then
    "$RTMGR" partition reset --journal "$STATE/state/journal.jsonl" 9>&- || true
  fi
  rm -rf "$STATE"
}
