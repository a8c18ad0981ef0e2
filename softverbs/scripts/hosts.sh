#!/usr/bin/env bash
# Hosts on one machine for softverbs between machines: N network namespaces joined by
# veth pairs, each with its own softverbs namespace directory, so that nothing but the
# network can carry data between them. Needs root and iproute2 (ip, tc).
#
#   hosts.sh up [-n N] [-l LINKS] [-m MTU]   make hosts 0..N-1 (N 2 by default, at most
#                                            200), each with LINKS interfaces (1 or 2):
#                                            eth0 192.0.2.(i+1)/24, eth1 198.51.100.(i+1)/24
#   hosts.sh down                            remove everything `up` made (idempotent)
#   hosts.sh exec I -- CMD [ARGS...]         run CMD in host I, with VQP_SOFT_DIR its
#                                            softverbs directory and VQP_SOFT_NETDEV
#                                            soft0=eth0[,soft1=eth1]
#   hosts.sh rate I LINK RATE|off            limit the egress of host I's eth<LINK> with
#                                            tc tbf (RATE: 500mbit, 1gbit, ...), or not
#   hosts.sh status                          what is up
#
# Two hosts are joined directly (one veth pair per link); three or more through a hub
# namespace with one bridge per link. Everything made is named after the prefix
# ($VQP_HOSTS_PREFIX, "vqph" by default): namespaces PREFIX-h0, PREFIX-h1, ...,
# PREFIX-hub, and the directory $VQP_HOSTS_DIR (/tmp/PREFIX by default), marked as
# made here. `down` removes only those; `up` refuses to start while any exists, and
# removes what it made when a step fails.
set -Eeuo pipefail

prefix=${VQP_HOSTS_PREFIX:-vqph}
if ! [[ $prefix =~ ^[a-z][a-z0-9-]{0,15}$ ]]; then
  echo "hosts.sh: VQP_HOSTS_PREFIX '$prefix': lower-case letters, digits and '-', 1-16, a letter first" >&2
  exit 2
fi
dir=${VQP_HOSTS_DIR:-/tmp/$prefix}
marker=.vqp-hosts
subnets=(192.0.2 198.51.100)

usage() {
  sed -n '4,16p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

say() { echo "hosts.sh: $*" >&2; }

# This prefix's namespaces, one a line.
ours() {
  ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^${prefix}-(h[0-9]+|hub)\$" || true
}

down() {
  local ns
  for ns in $(ours); do
    # Deleting a namespace deletes its interfaces, and with each veth its peer.
    ip netns del "$ns"
  done
  if [ -f "$dir/$marker" ]; then
    rm -rf -- "$dir"
  elif [ -e "$dir" ]; then
    say "$dir was not made by hosts.sh (no $marker): left alone"
  fi
}

# `ip` with the command echoed on failure.
run_ip() {
  ip "$@" || { say "failed: ip $*"; return 1; }
}

# Waits up to 5 s for LINK in namespace NS to be operationally up.
wait_up() {
  local ns=$1 link=$2 i
  for i in $(seq 250); do
    if [ "$(ip -n "$ns" -br link show dev "$link" | awk '{print $2}')" = UP ]; then
      return 0
    fi
    sleep 0.02
  done
  say "$link in $ns never came up"
  return 1
}

up() {
  local n=2 links=1 mtu=1500 opt
  OPTIND=1
  while getopts "n:l:m:" opt; do
    case $opt in
      n) n=$OPTARG ;;
      l) links=$OPTARG ;;
      m) mtu=$OPTARG ;;
      *) usage ;;
    esac
  done
  [[ $n =~ ^[0-9]+$ ]] && [ "$n" -ge 2 ] && [ "$n" -le 200 ] || { say "-n $n: 2 to 200 hosts"; exit 2; }
  [[ $links =~ ^[12]$ ]] || { say "-l $links: 1 or 2 links"; exit 2; }
  [[ $mtu =~ ^[0-9]+$ ]] && [ "$mtu" -ge 1280 ] && [ "$mtu" -le 9000 ] || { say "-m $mtu: 1280 to 9000"; exit 2; }
  if [ -n "$(ours)" ] || [ -e "$dir" ]; then
    say "already up (namespaces $(ours | tr '\n' ' ')or $dir exist): run 'hosts.sh down' first"
    exit 1
  fi
  # From here on, a failing step removes everything made so far.
  trap 'say "up failed: removing what it made"; trap - ERR; down; exit 1' ERR
  mkdir -p "$dir"
  touch "$dir/$marker"
  echo "$links" >"$dir/links"
  local i l hub="${prefix}-hub"
  for i in $(seq 0 $((n - 1))); do
    run_ip netns add "${prefix}-h$i"
    run_ip -n "${prefix}-h$i" link set lo up
    mkdir "$dir/h$i"
  done
  if [ "$n" -gt 2 ]; then
    run_ip netns add "$hub"
    for l in $(seq 0 $((links - 1))); do
      run_ip -n "$hub" link add "br$l" mtu "$mtu" type bridge
      run_ip -n "$hub" link set "br$l" up
    done
  fi
  for l in $(seq 0 $((links - 1))); do
    if [ "$n" -eq 2 ]; then
      run_ip -n "${prefix}-h0" link add "eth$l" mtu "$mtu" type veth \
        peer name "eth$l" netns "${prefix}-h1" mtu "$mtu"
    else
      for i in $(seq 0 $((n - 1))); do
        run_ip -n "$hub" link add "h${i}e$l" mtu "$mtu" type veth \
          peer name "eth$l" netns "${prefix}-h$i" mtu "$mtu"
        run_ip -n "$hub" link set "h${i}e$l" master "br$l" up
      done
    fi
    for i in $(seq 0 $((n - 1))); do
      run_ip -n "${prefix}-h$i" addr add "${subnets[$l]}.$((i + 1))/24" dev "eth$l"
      run_ip -n "${prefix}-h$i" link set "eth$l" up
    done
  done
  for i in $(seq 0 $((n - 1))); do
    for l in $(seq 0 $((links - 1))); do
      wait_up "${prefix}-h$i" "eth$l"
    done
  done
  trap - ERR
  status
}

status() {
  local ns
  if [ -z "$(ours)" ]; then
    echo "down"
    return
  fi
  for ns in $(ours | sort -V); do
    echo "$ns: $(ip -n "$ns" -br -4 addr show | awk '$1 != "lo" {sub(/@.*/, "", $1); print $1, $3}' | tr '\n' ' ')"
  done
}

# The host index argument, checked: its namespace must be up.
host() {
  local i=$1
  [[ $i =~ ^[0-9]+$ ]] || { say "host '$i': a number"; exit 2; }
  if ! ours | grep -qx "${prefix}-h$i"; then
    say "host $i is not up (hosts.sh status)"
    exit 1
  fi
}

exec_in() {
  [ $# -ge 3 ] && [ "$2" = -- ] || usage
  local i=$1
  host "$i"
  shift 2
  local links netdev=soft0=eth0
  links=$(cat "$dir/links")
  [ "$links" = 2 ] && netdev=soft0=eth0,soft1=eth1
  exec ip netns exec "${prefix}-h$i" env VQP_SOFT_DIR="$dir/h$i" VQP_SOFT_NETDEV="$netdev" "$@"
}

# RATE (a number and kbit, mbit or gbit) in bit/s.
rate_bits() {
  local r=$1
  [[ $r =~ ^([0-9]+)(kbit|mbit|gbit)$ ]] || { say "rate '$r': a number and kbit, mbit or gbit"; exit 2; }
  case ${BASH_REMATCH[2]} in
    kbit) echo $((BASH_REMATCH[1] * 1000)) ;;
    mbit) echo $((BASH_REMATCH[1] * 1000000)) ;;
    gbit) echo $((BASH_REMATCH[1] * 1000000000)) ;;
  esac
}

rate() {
  [ $# -eq 3 ] || usage
  local i=$1 l=$2 r=$3 ns
  host "$i"
  ns="${prefix}-h$i"
  [[ $l =~ ^[01]$ ]] && ip -n "$ns" link show dev "eth$l" >/dev/null 2>&1 || { say "host $i has no eth$l"; exit 1; }
  if [ "$r" = off ]; then
    ip netns exec "$ns" tc qdisc del dev "eth$l" root 2>/dev/null || true
    return
  fi
  local bits burst
  bits=$(rate_bits "$r")
  # The bucket holds 10 ms at the rate, and at least two 64 KiB segments (a veth
  # passes GSO segments whole; tbf drops a packet larger than its bucket).
  burst=$((bits / 8 / 100))
  [ "$burst" -ge 131072 ] || burst=131072
  ip netns exec "$ns" tc qdisc replace dev "eth$l" root tbf rate "$r" burst "$burst" latency 50ms
}

[ $# -ge 1 ] || usage
cmd=$1
shift
case $cmd in
  up) up "$@" ;;
  down) [ $# -eq 0 ] || usage; down ;;
  exec) exec_in "$@" ;;
  rate) rate "$@" ;;
  status) status ;;
  -h | --help | help) usage ;;
  *) say "unknown command '$cmd'"; usage ;;
esac
