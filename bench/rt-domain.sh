# Sourced by bench scripts that run kernel steps without the daemon inside a
# partition as `rtmgr serve` makes it: the last CPU is the RT CPU, and its
# cpuset rtmgr-rt/cpuN is a root domain of its own (daemon/domains.rs).
# `start_rt_domain_bench NAME` builds rtmgr unless RTMGR names one, takes
# the machine lock, makes OUT absolute and WORK a private directory (the
# caller removes it); `make_rt_domain` sets RT_CPU, RT, NRT (the
# partition's cpusets) and DOMAIN (the RT CPU's own cpuset);
# `give_back_rt_domain` (for the caller's EXIT trap) removes the domain and
# resets the partition, whatever was made so far.
RT_CPU=$(tr ',' '\n' < /sys/devices/system/cpu/online | tail -1 | sed 's/.*-//')
DOMAIN=
RT=
NRT=

start_rt_domain_bench() {
  if [ -z "${RTMGR:-}" ]; then
    cargo build --release -p rtmgr >/dev/null
    RTMGR=${CARGO_TARGET_DIR:-$PWD/target}/release/rtmgr
  fi
  . bench/machine-lock.sh
  take_machine_lock
  export RTMGR_LOCK_HELD=1
  mkdir -p "$OUT"
  OUT=$(cd "$OUT" && pwd)
  WORK=$(mktemp -d "/tmp/rtmgr-$1.XXXXXX")
}

make_rt_domain() {
  local part
  "$RTMGR" partition apply --rt-cpus "$RT_CPU" --journal "$WORK/journal.jsonl" 9>&- >/dev/null
  part=$("$RTMGR" partition show --json --journal "$WORK/journal.jsonl" 9>&-)
  RT=$(echo "$part" | python3 -c 'import json,sys; print(json.load(sys.stdin)["rt_cgroup"])')
  NRT=$(echo "$part" | python3 -c 'import json,sys; print(json.load(sys.stdin)["nrt_cgroup"])')
  DOMAIN=$RT/cpu$RT_CPU
  mkdir "$DOMAIN"
  echo "$RT_CPU" > "$DOMAIN/cpuset.cpus"
  cat "$RT/cpuset.mems" > "$DOMAIN/cpuset.mems"
  echo 1 > "$DOMAIN/cpuset.sched_load_balance"
}

give_back_rt_domain() {
  if [ -n "$DOMAIN" ]; then rmdir "$DOMAIN" 2>/dev/null || true; fi
  if [ -e "$WORK/journal.jsonl" ]; then
    "$RTMGR" partition reset --journal "$WORK/journal.jsonl" 9>&- >/dev/null || true
  fi
}
