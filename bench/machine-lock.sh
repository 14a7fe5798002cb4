# The machine lock for the benchmarks (sourced, not run): fd 9 holds an
# flock on /run/lock/rtmgr.lock, the lock rtmgr's own runs and tests take.
# rtmgr removes the file when it lets go, so an flock won on the file just
# removed is no lock at all (the next rtmgr locks a new file): take it again
# until the locked file is the one at the path, as rtmgr-sys/src/lock.rs does.
take_machine_lock() {
  local lock=/run/lock/rtmgr.lock said=
  while :; do
    exec 9>"$lock"
    if ! flock -n 9; then
      [ -n "$said" ] || echo "waiting for the machine lock ($lock), held by another rtmgr run" >&2
      said=1
      flock 9
    fi
    [ "$(stat -L -c %i /proc/self/fd/9)" = "$(stat -c %i "$lock" 2>/dev/null)" ] && return 0
    exec 9>&-
  done
}
