#!/usr/bin/env bash
# Runs a command against a standalone ZooKeeper server started here on a free
# loopback port, its data in a temporary directory (stopped by pid and removed on exit):
#   with_zookeeper.sh COMMAND [ARGS...]   (@PORT@ in ARGS is the client port)
set -uo pipefail
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }
dir=$(mktemp -d "${TMPDIR:-/tmp}/distlock-test-zk-XXXXXX")
port=$(free_port)
mkdir -p "$dir/data"
cat >"$dir/zoo.cfg" <<CFG
tickTime=250
dataDir=$dir/data
clientPort=$port
clientPortAddress=127.0.0.1
admin.enableServer=false
4lw.commands.whitelist=*
CFG
java -Xmx128m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Dznode.container.checkIntervalMs=500 \
  -cp /usr/share/java/zookeeper.jar:/usr/share/java/slf4j-simple.jar:/usr/share/java/slf4j-api.jar \
  org.apache.zookeeper.server.quorum.QuorumPeerMain "$dir/zoo.cfg" >"$dir/server.log" 2>&1 &
pid=$!
trap 'kill -KILL $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$dir"' EXIT
# Serving once "srvr" reports a mode (ruok answers before the server serves).
for _ in $(seq 600); do
  if exec 3<>"/dev/tcp/127.0.0.1/$port" 2>/dev/null; then
    printf srvr >&3
    if timeout 2 cat <&3 | grep -q '^Mode:'; then exec 3<&-; break; fi
    exec 3<&-
  fi
  sleep 0.05
done
args=()
for a in "$@"; do args+=("${a//@PORT@/$port}"); done
"${args[@]}"
