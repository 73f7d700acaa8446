#!/usr/bin/env bash
# Runs a command against a dynalite started here on a free loopback port (stopped by
# pid on exit), with test credentials in the environment:
#   with_dynalite.sh DYNALITE_CLI_JS COMMAND [ARGS...]   (@PORT@ in ARGS is the port)
set -uo pipefail
cli=$1
shift
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()')
node "$cli" --host 127.0.0.1 --port "$port" --createTableMs 0 >/dev/null 2>&1 &
pid=$!
trap 'kill -KILL $pid 2>/dev/null; wait $pid 2>/dev/null' EXIT
for _ in $(seq 200); do
  (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
  sleep 0.05
done
export AWS_ACCESS_KEY_ID=AKIDEXAMPLE AWS_SECRET_ACCESS_KEY=secret AWS_REGION=us-east-1
args=()
for a in "$@"; do args+=("${a//@PORT@/$port}"); done
"${args[@]}"
