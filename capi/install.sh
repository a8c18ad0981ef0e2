#!/usr/bin/env bash
# Builds vqp's C API and installs it into a prefix:
#   PREFIX/lib/libvqp.so.0.X.Y (SONAME libvqp.so.0), libvqp.so.0 and libvqp.so links,
#   PREFIX/lib/libvqp.a, PREFIX/lib/pkgconfig/vqp.pc, PREFIX/include/vqp.h and vqp.hpp.
#
# usage: capi/install.sh [--profile release|debug] [--no-build] PREFIX
#   --profile  the cargo profile to build and take the libraries from (release)
#   --no-build install what target/PROFILE holds already (tests use it)
# Then: PKG_CONFIG_PATH=PREFIX/lib/pkgconfig cc prog.c $(pkg-config --cflags --libs vqp)
set -euo pipefail
profile=release
build=1
while [ $# -gt 1 ]; do
  case "$1" in
    --profile) profile="$2"; shift 2 ;;
    --no-build) build=0; shift ;;
    *) echo "usage: $0 [--profile release|debug] [--no-build] PREFIX" >&2; exit 2 ;;
  esac
done
[ $# -eq 1 ] || { echo "usage: $0 [--profile release|debug] [--no-build] PREFIX" >&2; exit 2; }
prefix="$1"
case "$prefix" in /*) ;; *) prefix="$PWD/$prefix" ;; esac
here="$(cd "$(dirname "$0")" && pwd)"
root="$(dirname "$here")"
target="${CARGO_TARGET_DIR:-$root/target}"
if [ "$build" = 1 ]; then
  if [ "$profile" = release ]; then
    cargo build --manifest-path "$root/Cargo.toml" -p vqp-capi --release
  else
    cargo build --manifest-path "$root/Cargo.toml" -p vqp-capi --profile "$profile"
  fi
fi
dir="$target/$profile"
[ "$profile" = dev ] && dir="$target/debug"
# `cargo build` copies the libraries up to the profile directory; a test build leaves
# them in its deps directory only: the newer of the two is what was built last.
if [ "$build" = 0 ] && [ -f "$dir/deps/libvqp_capi.so" ] &&
   { [ ! -f "$dir/libvqp_capi.so" ] || [ "$dir/deps/libvqp_capi.so" -nt "$dir/libvqp_capi.so" ]; }; then
  dir="$dir/deps"
fi
for f in libvqp_capi.so libvqp_capi.a; do
  [ -f "$dir/$f" ] || { echo "$dir/$f is missing: build vqp-capi first" >&2; exit 1; }
done
# The C library's own version (its ABI's), from its package.
version="$(sed -n 's/^version = "\(.*\)"/\1/p' "$here/Cargo.toml" | head -n1)"
major="${version%%.*}"
install -d "$prefix/lib/pkgconfig" "$prefix/include"
install -m 0755 "$dir/libvqp_capi.so" "$prefix/lib/libvqp.so.$version"
ln -sf "libvqp.so.$version" "$prefix/lib/libvqp.so.$major"
ln -sf "libvqp.so.$major" "$prefix/lib/libvqp.so"
install -m 0644 "$dir/libvqp_capi.a" "$prefix/lib/libvqp.a"
install -m 0644 "$here/include/vqp.h" "$here/include/vqp.hpp" "$prefix/include/"
sed -e "s|@PREFIX@|$prefix|" -e "s|@VERSION@|$version|" "$here/vqp.pc.in" \
  > "$prefix/lib/pkgconfig/vqp.pc"
echo "installed vqp $version into $prefix"
