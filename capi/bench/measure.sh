#!/usr/bin/env bash
# measure.sh: the C API's 1-fragment round trip (bench/round_trip.c) beside the same
# loop in Rust (bench/round_trip_host.rs), both over softverbs in the process:
# instructions per request under callgrind, then ns per request as the median of
# alternating runs. Needs a C compiler and valgrind. Run from anywhere.
#
# usage: capi/bench/measure.sh [RUNS]   (timed runs of each, 7 by default)
#
# Per request = (I(20000) - I(10000)) / 10000, where I counts every function but
# softverbs' sweep of dead processes' state in its shared registry (/dev/shm): that
# runs once at start-up and costs what other processes left there, so it is not the
# loop's.
set -euo pipefail
cd "$(dirname "$0")/../.."
runs=${1:-7}
cargo build --quiet --release -p vqp-capi -p vqp-softverbs --lib --example round_trip_host
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
ln -s "$PWD/target/release/libvqp_capi.so" "$work/libvqp.so.0"
cc -std=c99 -O2 -Icapi/include capi/bench/round_trip.c -L"$work" -l:libvqp.so.0 \
  -Wl,-rpath,"$work" -o "$work/rt_c"
cp target/release/examples/round_trip_host "$work/rt_rust"
export VQP_IBVERBS_PATH=$PWD/target/release/libvqp_softverbs.so

# run PROGRAM N: one run in a fresh softverbs directory.
run() {
  export VQP_SOFT_DIR=$work/soft
  rm -rf "$VQP_SOFT_DIR"
  "$@"
}

# count FILE: the instructions of a callgrind profile, sweeps left out.
count() {
  callgrind_annotate --inclusive=no --threshold=100 --auto=no "$1" |
    awk '/^ *[0-9,]+ +\(/ && !/PROGRAM TOTALS/ && !/::sweep/ {
           gsub(",", "", $1); t += $1 } END { print t }'
}

declare -A ir
for p in rt_c rt_rust; do
  for n in 10000 20000; do
    run valgrind --tool=callgrind --callgrind-out-file="$work/cg.$p.$n" "$work/$p" $n \
      >/dev/null 2>&1
  done
  ir[$p]=$(( $(count "$work/cg.$p.20000") - $(count "$work/cg.$p.10000") ))
done
: >"$work/ns"
for _ in $(seq "$runs"); do
  for p in rt_c rt_rust; do
    echo "$p $(run "$work/$p" 100000 | grep -o '[0-9.]* ns' | cut -d' ' -f1 | paste -sd' ')" \
      >>"$work/ns"
  done
done
# median PROGRAM COLUMN: the median of one column (2: the clock, 3: CPU time).
median() { grep "^$1 " "$work/ns" | cut -d' ' -f"$2" | sort -g | awk '{v[NR] = $1}
  END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
awk -v ci="${ir[rt_c]}" -v ri="${ir[rt_rust]}" -v k="$runs" \
  -v cn="$(median rt_c 2)" -v rn="$(median rt_rust 2)" \
  -v cc="$(median rt_c 3)" -v rc="$(median rt_rust 3)" 'BEGIN {
  printf "%-20s %12s %12s %12s\n", "", "instr/req", "ns/req", "CPU ns/req"
  printf "%-20s %12.1f %12.1f %12.1f\n", "C API", ci / 10000, cn, cc
  printf "%-20s %12.1f %12.1f %12.1f\n", "Rust on vqp-host", ri / 10000, rn, rc
  printf "%-20s %+11.1f%% %+11.1f%% %+11.1f%%\n", "C API over Rust",
    100 * (ci - ri) / ri, 100 * (cn - rn) / rn, 100 * (cc - rc) / rc
  printf "(ns: medians of %d alternating runs of 100,000; CPU: the looping thread'"'"'s)\n", k }'
