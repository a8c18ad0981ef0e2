#!/usr/bin/env bash
# rstream over rsockets on softverbs (vqp-rdmacm's librdmacm, two processes through
# `softverbs run`) beside rstream over TCP on loopback (`-T s`), the same transfer sizes
# and counts, in one run; prints rstream's result line of each, then one table.
#
#   bash rdmacm/bench/rstream_vs_tcp.sh            # release build, 4 KiB, 64 KiB, 1 MiB
#   SIZES="65536 1048576" COUNT=500 PROFILE=debug bash rdmacm/bench/rstream_vs_tcp.sh
#
# Needs Debian's rdmacm-utils (rstream) and iproute2 (ss, to see a TCP server listen).
# rstream's figures are of its ping-pong: each transfer is sent both ways, and Gb/sec
# counts both directions. Each pair runs in a namespace directory of its own; every
# program is bounded by a timeout.
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
profile=${PROFILE:-release}
sizes=${SIZES:-4096 65536 1048576}  # bytes (rstream -S takes a plain number)
count=${COUNT:-1000}
limit=${LIMIT:-120}

for p in rstream ss; do
  command -v "$p" >/dev/null || { echo "rstream_vs_tcp: needs $p (rdmacm-utils, iproute2)" >&2; exit 1; }
done

flag=()
[ "$profile" = release ] && flag=(--release)
cargo build --quiet "${flag[@]}" --manifest-path "$root/Cargo.toml" -p vqp-softverbs -p vqp-rdmacm
launcher=$root/target/$profile/softverbs
lib=$root/target/$profile/libvqp_rdmacm.so
[ -x "$launcher" ] && [ -f "$lib" ] || { echo "rstream_vs_tcp: $launcher or $lib is missing" >&2; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# A free TCP port (the kernel's choice, released at once).
free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# Waits until `check` succeeds, at most 20 s.
wait_for() {
  local i
  for i in $(seq 400); do
    if "$@"; then return 0; fi
    sleep 0.05
  done
  echo "rstream_vs_tcp: the server never listened" >&2
  return 1
}

rdma_listening() { compgen -G "$1/rdmacm/l-*-$2" >/dev/null; }
tcp_listening() { ss -Hltn "sport = :$1" | grep -q .; }

# run_pair KIND SIZE: prints the client's result line ("custom ...").
run_pair() {
  local kind=$1 size=$2 port out
  port=$(free_port)
  out=$work/$kind-$size
  if [ "$kind" = rsockets ]; then
    local dir=$work/ns-$size
    mkdir -p "$dir"
    VQP_RDMACM_LIB=$lib timeout "$limit" "$launcher" run --dir "$dir" -- \
      rstream -p "$port" -S "$size" -C "$count" >"$out.server" 2>&1 &
    local srv=$!
    wait_for rdma_listening "$dir" "$port"
    VQP_RDMACM_LIB=$lib timeout "$limit" "$launcher" run --dir "$dir" -- \
      rstream -s 127.0.0.1 -p "$port" -S "$size" -C "$count" >"$out" 2>&1
  else
    timeout "$limit" rstream -T s -p "$port" -S "$size" -C "$count" >"$out.server" 2>&1 &
    local srv=$!
    wait_for tcp_listening "$port"
    timeout "$limit" rstream -T s -s 127.0.0.1 -p "$port" -S "$size" -C "$count" >"$out" 2>&1
  fi
  wait "$srv"
  grep '^custom ' "$out" || { echo "rstream_vs_tcp: no result from $kind $size:" >&2; cat "$out" "$out.server" >&2; return 1; }
}

echo "rstream, $count transfers each way per size ($profile build of softverbs and vqp-rdmacm)"
printf '%-10s%-10s%-8s%-8s%-8s%-8s%8s %10s%13s\n' transport name bytes xfers iters total time Gb/sec usec/xfer
declare -A bw
for size in $sizes; do
  for kind in rsockets tcp; do
    line=$(run_pair "$kind" "$size")
    printf '%-10s%s\n' "$kind" "$line"
    bw[$kind-$size]=$(awk '{print $7}' <<<"$line")
  done
done
echo
printf '%-8s %16s %16s\n' size "rsockets Gb/sec" "TCP Gb/sec"
for size in $sizes; do
  printf '%-8s %16s %16s\n' "$size" "${bw[rsockets-$size]}" "${bw[tcp-$size]}"
done
