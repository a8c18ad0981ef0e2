#!/usr/bin/env bash
# Memcheck over softverbs: short runs of the debug builds of write_bw (both modes) and
# lat (both modes), which load the provider's cdylib and run its progress thread, of
# the provider's C-ABI misuse, responder-error and extended-verbs tests, and of
# vqp-rdmacm's behaviour tests (its C functions, agent thread and QPs over the
# provider). Any valgrind error fails the run, leaks included ("definitely" or
# "possibly lost"); so does a write_bw whose data check does not pass. Runs from the repository root; builds what it runs.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TERM_COLOR=never

command -v valgrind >/dev/null 2>&1 || {
  echo "valgrind.sh: valgrind is not installed (apt-get install valgrind)" >&2
  exit 1
}

cargo build --quiet --example write_bw --example lat
# cargo names the test executables it built ("Executable tests/x.rs (target/...)").
tests=$( (cargo test -p vqp-softverbs --test bad_calls --test responder_errors --test xverbs --no-run 2>&1
  cargo test -p vqp-rdmacm --test behaviour --no-run 2>&1) |
  grep -o 'target/debug/deps/[a-z_]*-[0-9a-f]*' || true)
[ "$(wc -w <<<"$tests")" = 4 ] || { echo "valgrind.sh: test binaries not found: $tests" >&2; exit 1; }

# One suppression, for the Rust standard library rather than this project: the main
# thread's `std::thread::current()` handle is referenced only through a pointer into
# the middle of its allocation, which memcheck reports as "possibly lost" at exit
# (rust-lang/rust#135608). lat's main thread takes it when it waits on a channel.
supp=$(mktemp)
trap 'rm -f "$supp"' EXIT
cat >"$supp" <<'EOF'
{
   rust-std-main-thread-handle-rust-lang-rust-135608
   Memcheck:Leak
   match-leak-kinds: possible
   fun:malloc
   ...
   fun:*init_current*
}
EOF

# Memcheck runs one thread at a time; its default lock lets a thread that spins (a
# poll loop) take it back at once, so a thread holding softverbs' execution token can
# wait for seconds on a loaded machine. --fair-sched=yes hands the lock round in turn.
vg() {
  valgrind --quiet --fair-sched=yes --error-exitcode=9 --leak-check=full \
    --errors-for-leak-kinds=definite,possible --suppressions="$supp" "$@"
}

for mode in dqplb spray; do
  printf '\n=== valgrind: write_bw --mode %s\n' "$mode"
  out=$(vg target/debug/examples/write_bw --size 65537 --iters 50 --mode "$mode")
  printf '%s\n' "$out"
  grep -q "every byte verified on the .*: passed" <<<"$out"
done

for mode in dqplb spray; do
  printf '\n=== valgrind: lat --mode %s\n' "$mode"
  vg target/debug/examples/lat --size 4096 --iters 50 --warmup 5 --mode "$mode"
done

for t in $tests; do
  printf '\n=== valgrind: %s\n' "$t"
  vg "$t" --quiet
done

printf '\n=== valgrind: clean\n'
