#!/usr/bin/env bash
# Install the rtmgr-rt C library: lib/librtmgr_rt.{a,so}, include/rtmgr.h and
# lib/pkgconfig/rtmgr-rt.pc (from crates/rtmgr-rt/rtmgr-rt.pc.in).
#   bash scripts/install-c.sh [--prefix /usr/local] [--libs-from DIR] [--destdir DIR]
# --destdir stages the files under DIR/PREFIX while the .pc file still names
# PREFIX (as for a package: scripts/package.sh).
# Without --libs-from it builds with `cargo build --release -p rtmgr-rt` and
# takes the libraries from the cargo target dir. Then:
#   cc app.c $(pkg-config --cflags --libs rtmgr-rt)            # shared
#   cc app.c $(pkg-config --cflags rtmgr-rt) /usr/local/lib/librtmgr_rt.a $(pkg-config --libs-only-l --static rtmgr-rt | sed 's/-lrtmgr_rt//')
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
prefix=/usr/local
libs_from=""
destdir=""
while [ $# -gt 0 ]; do
  case "$1" in
    --prefix) prefix="$2"; shift 2 ;;
    --libs-from) libs_from="$2"; shift 2 ;;
    --destdir) destdir="$2"; shift 2 ;;
    *) echo "usage: $0 [--prefix DIR] [--libs-from DIR] [--destdir DIR]" >&2; exit 2 ;;
  esac
done
if [ -z "$libs_from" ]; then
  (cd "$root" && cargo build --release -p rtmgr-rt)
  libs_from="${CARGO_TARGET_DIR:-$root/target}/release"
fi
version="$(sed -n 's/^version = "\(.*\)"/\1/p' "$root/Cargo.toml" | head -n1)"
dest="$destdir$prefix"
install -d "$dest/lib/pkgconfig" "$dest/include"
install -m 0644 "$libs_from/librtmgr_rt.a" "$dest/lib/"
install -m 0755 "$libs_from/librtmgr_rt.so" "$dest/lib/"
install -m 0644 "$root/include/rtmgr.h" "$dest/include/"
sed -e "s|@PREFIX@|$prefix|" -e "s|@VERSION@|$version|" \
  "$root/crates/rtmgr-rt/rtmgr-rt.pc.in" > "$dest/lib/pkgconfig/rtmgr-rt.pc"
echo "installed rtmgr-rt $version into $dest"
