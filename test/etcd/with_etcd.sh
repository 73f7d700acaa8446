#!/usr/bin/env bash
# Runs a command against an etcd member started here on free loopback ports, its data
# in a temporary directory (stopped by pid and removed on exit):
#   with_etcd.sh COMMAND [ARGS...]   (@PORT@ in ARGS is the client port)
set -uo pipefail
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }
base=/dev/shm
[ -d "$base" ] || base=${TMPDIR:-/tmp}
dir=$(mktemp -d "$base/distlock-test-etcd-XXXXXX")
port=$(free_port)
peer=$(free_port)
etcd --name demo --data-dir "$dir/data" \
  --listen-client-urls "http://127.0.0.1:$port" --advertise-client-urls "http://127.0.0.1:$port" \
  --listen-peer-urls "http://127.0.0.1:$peer" --initial-advertise-peer-urls "http://127.0.0.1:$peer" \
  --initial-cluster "demo=http://127.0.0.1:$peer" --logger zap --log-level error >/dev/null 2>&1 &
pid=$!
trap 'kill -KILL $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$dir"' EXIT
for _ in $(seq 400); do
  (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
  sleep 0.05
done
args=()
for a in "$@"; do args+=("${a//@PORT@/$port}"); done
"${args[@]}"
