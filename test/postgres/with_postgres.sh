#!/usr/bin/env bash
# Runs a command against a private PostgreSQL cluster made here (initdb in a temporary
# directory, the server on a free loopback port, as the postgres user when run as
# root), stopped by pid and removed on exit:
#   with_postgres.sh COMMAND [ARGS...]   (@PORT@ in ARGS is the server's port)
set -uo pipefail
bin=""
for v in 15 16 17; do
  [ -x "/usr/lib/postgresql/$v/bin/postgres" ] && bin="/usr/lib/postgresql/$v/bin" && break
done
[ -n "$bin" ] || { echo "with_postgres.sh: postgresql-15 is not installed" >&2; exit 1; }
dir=$(mktemp -d /tmp/distlock-pg-XXXXXX)
as_postgres=()
if [ "$(id -u)" = 0 ]; then
  chown postgres:postgres "$dir"
  as_postgres=(setpriv --reuid=postgres --regid=postgres --clear-groups --reset-env)
fi
pid=""
cleanup() {
  if [ -n "$pid" ]; then
    kill -INT "$pid" 2>/dev/null
    for _ in $(seq 200); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
    kill -KILL "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
  fi
  rm -rf "$dir"
}
trap cleanup EXIT
"${as_postgres[@]}" "$bin/initdb" -D "$dir/data" -U postgres -A trust -E UTF8 --locale=C --no-sync \
  --no-instructions >/dev/null || exit 1
for _ in 1 2 3 4 5; do
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()')
  "${as_postgres[@]}" "$bin/postgres" -D "$dir/data" -p "$port" -k "$dir" -c listen_addresses=127.0.0.1 \
    -c fsync=off -c synchronous_commit=off -c full_page_writes=off >"$dir/server.log" 2>&1 &
  pid=$!
  for _ in $(seq 200); do
    "$bin/pg_isready" -q -h 127.0.0.1 -p "$port" -U postgres && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.05
  done
  "$bin/pg_isready" -q -h 127.0.0.1 -p "$port" -U postgres && break
  wait "$pid" 2>/dev/null
  pid=""
done
[ -n "$pid" ] || { echo "with_postgres.sh: the server did not start" >&2; cat "$dir/server.log" >&2; exit 1; }
args=()
for a in "$@"; do args+=("${a//@PORT@/$port}"); done
"${args[@]}"
