#!/usr/bin/env bash
# End-to-end tests of the distlock command-line tool against a real redis-server,
# started here on a free loopback port in a temporary directory and stopped by pid.
#   run.sh DISTLOCK_BINARY REDIS_SERVER_BINARY [DYNALITE_CLI_JS [POSTGRES_URL]]
# With dynalite's cli.js, also against a dynalite (the DynamoDB API) started the same
# way; with a PostgreSQL URL (test/postgres/with_postgres.sh makes a private cluster),
# against that database too.
# Every wait is bounded (timeout(1) or a counted loop); nothing asserts on how long
# something took, only on what happened and in which order, apart from the lock-delay,
# whose point is a time (checked with a second of slack).
set -uo pipefail

distlock=$1
redis_server=$2
dynalite=${3:-}
postgres=${4:-}
work=$(mktemp -d)
failures=0
pids=()

cleanup() {
  for p in "${pids[@]}"; do kill -CONT "$p" 2>/dev/null; kill -KILL "$p" 2>/dev/null; done
  wait 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

check() { # description, then a command that must succeed
  local what=$1
  shift
  if "$@"; then
    echo "ok   - $what"
  else
    echo "FAIL - $what"
    failures=$((failures + 1))
  fi
}

matches() { [[ $1 =~ $2 ]]; }

# Runs a command until it succeeds, at most 200 times 50 ms apart (a hang bound, not
# a timing claim).
eventually() {
  for _ in $(seq 200); do
    "$@" 2>/dev/null && return 0
    sleep 0.05
  done
  return 1
}

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

start_redis() { # prints the port; the pid goes to pids and $last_pid
  local p
  p=$(free_port)
  mkdir -p "$work/$p"
  "$redis_server" --port "$p" --bind 127.0.0.1 --save '' --appendonly no --dir "$work/$p" >"$work/$p/log" 2>&1 &
  last_pid=$!
  pids+=("$last_pid")
  eventually bash -c "exec 3<>/dev/tcp/127.0.0.1/$p"
  port=$p
}
start_redis
redis_pid=$last_pid
store="redis://127.0.0.1:$port"
dl() { timeout 60 "$distlock" "$@"; }
held_on_store() { dl status --store "$store" "$1" | grep -q '^held'; }

# --- Bad input: usage (exit 2), before any store is touched (port 1 is closed).
usage_is_2() { dl "$@" >/dev/null 2>&1; [[ $? -eq 2 ]]; }
check "no arguments is a usage error" usage_is_2
check "an unknown command is a usage error" usage_is_2 frobnicate x
check "run without a command is a usage error" usage_is_2 run --store redis://127.0.0.1:1 job
check "a zero duration is a usage error" usage_is_2 run --store redis://127.0.0.1:1 --ttl 0s job -- true
check "a duration without a unit is a usage error" usage_is_2 run --ttl 30 job -- true
check "an unknown store is a usage error" usage_is_2 run --store ftp://x job -- true
check "a bad Redis URL is a usage error" usage_is_2 run --store redis://h:notaport job -- true
err=$(dl run --store 'redis://[::1]junk' job -- true 2>&1)
check "a refused store URL is a usage error (exit 2)" test $? -eq 2
check "... that names the URL and says what is wrong" \
  matches "$err" "bad store URL 'redis://\[::1\]junk': text after the bracketed host '\[::1\]': 'junk'"
err=$(dl run --store redis://127.0.0.1:1 --store redis://127.0.0.1:99999 job -- true 2>&1)
check "... for any store of a quorum" matches "$err" "port '99999' of '127.0.0.1:99999' is not a decimal number from 1 to 65535"
check "an empty resource is a usage error" usage_is_2 run --store redis://127.0.0.1:1 "" -- true
check "a resource over 1024 bytes is a usage error" usage_is_2 run --store redis://127.0.0.1:1 "$(printf 'x%.0s' $(seq 1025))" -- true
check "--help prints the usage" bash -c "'$distlock' --help | grep -q '^usage: distlock run'"

# --- The child's environment, and its exit code passed through.
out=$(dl run --store "$store" job -- sh -c 'echo "$DISTLOCK_RESOURCE $DISTLOCK_FENCE"')
check "the child sees the resource and a fence" test "${out%% *}" = job -a "${out##* }" -ge 1
out2=$(dl run --store "$store" job -- sh -c 'echo "$DISTLOCK_FENCE"')
check "fences grow from one run to the next" test "$out2" -gt "${out##* }"
dl run --store "$store" job -- sh -c 'exit 7'
check "the command's exit code is passed through" test $? -eq 7
out=$(dl run --store "$store" zeta alpha -- sh -c 'echo "$DISTLOCK_COUNT $DISTLOCK_RESOURCE_0 $DISTLOCK_RESOURCE_1"')
check "several resources: sorted, one variable each" test "$out" = "2 alpha zeta"
dl run --store "$store" job -- /nonexistent/command 2>/dev/null
check "a command that cannot start exits 127" test $? -eq 127
dl run job -- sh -c 'test -n "$DISTLOCK_FENCE"'
check "the memory store works for a single run" test $? -eq 0

# --- While a holder runs: try, status, --wait.
"$distlock" run --store "$store" held -- sleep 30 &
holder=$!
pids+=("$holder")
eventually held_on_store held
status_line=$(dl status --store "$store" held)
check "status reports the holder, a fence and the time left" \
  bash -c "[[ '$status_line' =~ ^held,\ fence\ [0-9]+,\ owner\ [0-9a-f]{8}\.\.\.,\ [0-9]+\ ms\ left$ ]]"
json=$(dl try --store "$store" --json held)
rc=$?
check "try on a held lock exits 3" test $rc -eq 3
check "try --json says held" test "$json" = '{"acquired":false,"held":true}'
dl run --store "$store" --wait 300ms held -- true 2>/dev/null
rc=$?
check "--wait gives up with exit 3 while the holder still holds" test $rc -eq 3
check "... and the holder was still running then" kill -0 "$holder"
kill -TERM "$holder"
wait "$holder"
check "SIGTERM to distlock reaches the child (sleep dies of it: 143)" test $? -eq 143
check "after the holder stopped, the lock is free" dl try --store "$store" held
check "status says free" bash -c "'$distlock' status --store '$store' held | grep -q '^free'"

# --- Signals are forwarded; the child decides how to exit.
"$distlock" run --store "$store" trapper -- sh -c 'trap "exit 42" INT; while :; do sleep 0.05; done' &
runner=$!
pids+=("$runner")
eventually held_on_store trapper
kill -INT "$runner"
wait "$runner"
check "SIGINT is forwarded to the child, whose exit code is distlock's" test $? -eq 42
check "the lock was released" dl try --store "$store" trapper

# --- Lease lost: the server stops answering, the child is stopped, exit 5.
"$distlock" run --store "$store" --ttl 1s --grace 1s doomed -- sh -c 'trap "" TERM; sleep 60' &
doomed=$!
pids+=("$doomed")
eventually held_on_store doomed
kill -STOP "$redis_pid"
rc=0
for _ in $(seq 600); do # the child ignores SIGTERM: SIGKILL after the grace period
  if ! kill -0 "$doomed" 2>/dev/null; then break; fi
  sleep 0.05
done
wait "$doomed"
rc=$?
kill -CONT "$redis_pid"
check "a lost lease stops the child and exits 5" test $rc -eq 5

# --- elect: one leader at a time, the epoch in the command's environment.
check "elect takes one name" usage_is_2 elect --store "$store" a b -- true
check "elect needs a command" usage_is_2 elect --store "$store" leader
check "only elect takes --value" usage_is_2 run --store "$store" --value x job -- true
check "elect on a Redlock quorum is a usage error" usage_is_2 elect --store "$store" --store "$store" leader -- true
check "--lock-delay beyond --ttl is a usage error" usage_is_2 run --store "$store" --ttl 1s --lock-delay 2s job -- true
out=$(dl elect --store "$store" --value first leader -- sh -c 'echo "$DISTLOCK_EPOCH $DISTLOCK_RESOURCE"')
check "the leader's command sees its epoch and the election's name" test "${out##* }" = leader -a "${out%% *}" -ge 1
first_epoch=${out%% *}
"$distlock" elect --store "$store" --value one leader -- sh -c 'echo "$DISTLOCK_EPOCH" > "$0/one"; sleep 30' "$work" &
one=$!
pids+=("$one")
eventually test -s "$work/one"
"$distlock" elect --store "$store" --value two leader -- sh -c 'echo "$DISTLOCK_EPOCH" > "$0/two"' "$work" &
two=$!
pids+=("$two")
sleep 0.5
check "a second participant does not lead while the first does" test ! -e "$work/two"
check "the first term's epoch is larger than the last one's" test "$(cat "$work/one")" -gt "$first_epoch"
kill -TERM "$one"
wait "$one"
wait "$two"
check "the second leads once the first exits, with a larger epoch" test "$(cat "$work/two")" -gt "$(cat "$work/one")"

# --- --lock-delay: a holder killed without releasing keeps the lock from everyone until
# the delay after its lease ran out, and no longer; a normal exit releases at once.
check "--lock-delay: a run that exits normally" dl run --store "$store" --ttl 2s --lock-delay 2s calm -- true
check "... releases at once: the next try takes the lock" dl try --store "$store" calm
"$distlock" run --store "$store" --ttl 2s --lock-delay 2s delayed -- \
  sh -c 'echo $$ > "$0/delayed.pid"; exec sleep 61.5' "$work" &
delayed=$!
pids+=("$delayed")
eventually test -s "$work/delayed.pid"
pids+=("$(cat "$work/delayed.pid")")
killed_at=$(date +%s%3N) # before the kill: the lease runs out no earlier
kill -KILL "$delayed"     # distlock itself dies without releasing; the lock runs out in its TTL
wait "$delayed" 2>/dev/null
kill -KILL "$(cat "$work/delayed.pid")" 2>/dev/null
dl try --store "$store" delayed 2>/dev/null
check "right after the kill the lock is not free (held, then in its lock-delay)" test $? -eq 3
json=""
delay_ms=""
for _ in $(seq 200); do # until the lease has run out and a try hears the delay
  json=$(dl try --json --store "$store" delayed 2>/dev/null)
  if [[ $json =~ \"lock_delay_ms\":([0-9]+) ]]; then
    delay_ms=${BASH_REMATCH[1]}
    break
  fi
  sleep 0.05
done
tombstone_end=$(($(date +%s%3N) + ${delay_ms:-0})) # no earlier than the server's end
check "once the lease ran out, a try is refused for the lock-delay, saying how long" test -n "$delay_ms"
check "... no longer than the delay" test "${delay_ms:-9999}" -le 2000
dl run --store "$store" --wait 20s delayed -- sh -c 'date +%s%3N > "$0/granted"' "$work"
check "a waiting run is granted" test $? -eq 0
granted=$(cat "$work/granted" 2>/dev/null || echo 0)
check "... not before the delay after the kill" test "$granted" -ge $((killed_at + 2000))
check "... and within a second of the lock-delay's end" test "$granted" -le $((tombstone_end + 1000))

# --- release --owner: an operator clears the lock of a holder that vanished.
"$distlock" run --store "$store" -v --ttl 60s orphan -- sleep 61.25 2>"$work/orphan.err" &
orphan=$!
pids+=("$orphan")
eventually grep -q 'owner' "$work/orphan.err"
owner=$(sed -n 's/.*owner \([0-9a-f]\{32\}\).*/\1/p' "$work/orphan.err" | head -1)
kill -KILL "$orphan" # distlock dies without releasing; its child goes on, and the lock stays
wait "$orphan" 2>/dev/null
pkill -KILL -f "sleep 61.25" 2>/dev/null
dl try --store "$store" orphan
check "a lock whose holder was killed stays held (its TTL is 60 s)" test $? -eq 3
dl release --store "$store" --owner 0123456789abcdef0123456789abcdef orphan 2>/dev/null
check "release by another owner does nothing (exit 3)" test $? -eq 3
check "release by the holder's owner id frees it" dl release --store "$store" --owner "$owner" orphan
check "... and the lock can be taken" dl try --store "$store" orphan

# --- list and revoke: an operator sees the locks held and takes one back by its fence.
# Checks that a listing shows `resource` held with a fence and an owner (8 hex).
listed() { # store args..., resource
  local resource=${!#}
  dl list "${@:1:$#-1}" | grep -Eq "^$resource  fence [0-9]+  owner [0-9a-f]{8}\.\.\."
}
list_and_revoke() { # what, then the --store arguments
  local what=$1
  shift
  "$distlock" run "$@" --ttl 3s ops:held -- sleep 60 2>"$work/revoked.err" &
  local holder=$!
  pids+=("$holder")
  eventually listed "$@" ops:held
  check "$what: list shows the holder with its fence and owner" listed "$@" ops:held
  check "$what: list PREFIX leaves out other resources" test -z "$(dl list "$@" nothing: 2>&1)"
  local json fence
  json=$(dl list "$@" --json ops: | head -1)
  check "$what: list --json" matches "$json" '^[{]"node":0,"resource":"ops:held","fence":[0-9]+,"owner":"[0-9a-f]{8}"'
  fence=$(sed -n 's/.*"fence":\([0-9]*\).*/\1/p' <<<"$json")
  dl revoke "$@" --fence $((fence + 1)) ops:held 2>/dev/null
  check "$what: revoke with another grant's fence does nothing (exit 3)" test $? -eq 3
  check "$what: ... the lock still held" listed "$@" ops:held
  check "$what: revoke --fence frees the lock" dl revoke "$@" --fence "$fence" ops:held
  # The holder's next renewal fails: run stops the command and exits 5.
  wait "$holder"
  check "$what: the revoked holder stops its command (exit 5)" test $? -eq 5
  check "$what: ... and the lock can be taken" dl try "$@" ops:held
}
list_and_revoke "Redis" --store "$store"
"$distlock" run --store "$store" -v --ttl 60s ops:owned -- sleep 60 2>"$work/owned.err" &
owned=$!
pids+=("$owned")
eventually grep -q 'owner' "$work/owned.err"
owner=$(sed -n 's/.*owner \([0-9a-f]\{32\}\).*/\1/p' "$work/owned.err" | head -1)
dl revoke --store "$store" --owner abcdef01 ops:owned 2>/dev/null
check "revoke --owner of another owner does nothing (exit 3)" test $? -eq 3
check "revoke --owner with the 8 digits list shows frees the lock" dl revoke --store "$store" --owner "${owner:0:8}" ops:owned
wait "$owned"
check "... and its holder exits 5" test $? -eq 5
dl revoke --store "$store" --fence 0 x 2>/dev/null
check "revoke --fence 0 is a usage error (exit 2)" test $? -eq 2
dl revoke --store "$store" --fence 1 --owner abcdef01 x 2>/dev/null
check "revoke with both --fence and --owner is a usage error (exit 2)" test $? -eq 2

# --- Two runs on one resource never overlap: a counter in a file, read-modify-write.
echo 0 >"$work/counter"
increment() {
  for _ in $(seq 15); do
    dl run --store "$store" counter -- sh -c "v=\$(cat '$work/counter'); sleep 0.01; echo \$((v + 1)) > '$work/counter'" || return 1
  done
}
increment & a=$!
increment & b=$!
wait "$a"; ra=$?
wait "$b"; rb=$?
check "both incrementing loops succeeded" test $ra -eq 0 -a $rb -eq 0
check "no increment was lost (30)" test "$(cat "$work/counter")" -eq 30

# --- --max-hold stops a command that runs too long: exit 6.
dl run --store "$store" --max-hold 300ms --grace 200ms slow -- sleep 30 2>/dev/null
check "--max-hold stops the command and exits 6" test $? -eq 6
json=$(dl status --store "$store" --json slow)
free_json='^[{]"node":0,"held":false,"fence":[0-9]+[}]$'
check "status --json when free" matches "$json" "$free_json"

# --- A Redlock quorum of three servers.
start_redis; q1="redis://127.0.0.1:$port"
start_redis; q2="redis://127.0.0.1:$port"
out=$(dl run --store "$store" --store "$q1" --store "$q2" quorum -- sh -c 'echo "$DISTLOCK_FENCE"')
check "a quorum run hands the child a fence" test "$out" -ge 1
"$distlock" run --store "$store" --store "$q1" --store "$q2" quorum -- sleep 30 &
qholder=$!
pids+=("$qholder")
held_on_quorum() { [[ $(dl status --store "$store" --store "$q1" --store "$q2" quorum 2>/dev/null | grep -c ': held') -eq 3 ]]; }
eventually held_on_quorum
check "status on a quorum shows every node holding" \
  test "$(dl status --store "$store" --store "$q1" --store "$q2" quorum | grep -c '^node [0-2]: held')" -eq 3
dl try --store "$store" --store "$q1" --store "$q2" quorum
check "try on a quorum-held lock exits 3" test $? -eq 3
kill -TERM "$qholder"
wait "$qholder"
check "the quorum lock is released when its command ends" dl try --store "$store" --store "$q1" --store "$q2" quorum
"$distlock" run --store "$store" --store "$q1" --store "$q2" -v --ttl 3s quorum -- sleep 60 2>"$work/qowned.err" &
qholder=$!
pids+=("$qholder")
eventually held_on_quorum
check "list on a quorum shows the lock on every node" \
  test "$(dl list --store "$store" --store "$q1" --store "$q2" quorum | grep -c '^node [0-2]: quorum  fence')" -eq 3
owner=$(sed -n 's/.*owner \([0-9a-f]\{32\}\).*/\1/p' "$work/qowned.err" | head -1)
check "revoke --owner on a quorum takes the lock back on every node" \
  test "$(dl revoke --store "$store" --store "$q1" --store "$q2" --owner "$owner" quorum | grep -c '^revoked')" -eq 3
wait "$qholder"
check "... and its holder exits 5" test $? -eq 5

# --- DynamoDB (dynalite), in the default record-version mode.
if [ -n "$dynalite" ]; then
  dport=$(free_port)
  node "$dynalite" --host 127.0.0.1 --port "$dport" --createTableMs 0 >"$work/dynalite.log" 2>&1 &
  pids+=("$!")
  eventually bash -c "exec 3<>/dev/tcp/127.0.0.1/$dport"
  export AWS_ACCESS_KEY_ID=AKIDEXAMPLE AWS_SECRET_ACCESS_KEY=secret AWS_REGION=us-east-1
  ddb="dynamodb://127.0.0.1:$dport?table=cli_locks"
  err=$(dl try --store "$ddb" ddb:job 2>&1)
  check "a missing table is a bad argument (exit 2), said so" test $? -eq 2
  check "... with the reason" matches "$err" "table does not exist"
  out=$(dl run --store "$ddb" --create-table ddb:job -- sh -c 'echo "$DISTLOCK_FENCE"')
  check "run --create-table makes the table and hands the child fence 1" test "$out" = 1
  out=$(dl run --store "$ddb" ddb:job -- sh -c 'echo "$DISTLOCK_FENCE"')
  check "the next run gets fence 2 (the item keeps its counter)" test "$out" = 2
  # The table exists: --create-table checks and goes on, without waiting for dynalite to
  # drop the idle connection (5 s), as it once did. 4 s bounds a hang, not a speed.
  check "--create-table on an existing table goes on at once" \
    timeout 4 "$distlock" run --store "$ddb" --create-table ddb:job -- true
  "$distlock" run --store "$ddb" ddb:job -- sleep 30 &
  dholder=$!
  pids+=("$dholder")
  held_on_dynamodb() { dl status --store "$ddb" ddb:job 2>/dev/null | grep -q 'held'; }
  eventually held_on_dynamodb
  dl try --store "$ddb" ddb:job
  check "try on a DynamoDB-held lock exits 3" test $? -eq 3
  kill -TERM "$dholder"
  wait "$dholder"
  check "the DynamoDB lock is released when its command ends" dl try --store "$ddb" ddb:job
  list_and_revoke "DynamoDB" --store "$ddb"
  dl run --store "$ddb" --store "$ddb" ddb:job -- true 2>/dev/null
  check "two DynamoDB stores is a usage error (exit 2)" test $? -eq 2
  dl run --store "redis://127.0.0.1:1" --create-table x -- true 2>/dev/null
  check "--create-table on a Redis store is a usage error (exit 2)" test $? -eq 2
fi

# --- PostgreSQL: the lease table, then advisory locks (mode=advisory).
if [ -n "$postgres" ]; then
  pgt="$postgres&table=cli_locks"
  out=$(dl run --store "$pgt" pg:job -- sh -c 'echo "$DISTLOCK_FENCE"')
  check "run on PostgreSQL makes the table and hands the child fence 1" test "$out" = 1
  out=$(dl run --store "$pgt" pg:job -- sh -c 'echo "$DISTLOCK_FENCE"')
  check "the next run gets fence 2 (the row keeps its counter)" test "$out" = 2
  "$distlock" run --store "$pgt" pg:job -- sleep 30 &
  pholder=$!
  pids+=("$pholder")
  held_on_postgres() { dl status --store "$pgt" pg:job 2>/dev/null | grep -q '^held'; }
  eventually held_on_postgres
  check "status shows the PostgreSQL lock held" held_on_postgres
  dl try --store "$pgt" pg:job
  check "try on a PostgreSQL-held lock exits 3" test $? -eq 3
  kill -TERM "$pholder"
  wait "$pholder"
  check "the PostgreSQL lock is released when its command ends" dl try --store "$pgt" pg:job
  list_and_revoke "PostgreSQL" --store "$pgt"
  pga="$pgt&mode=advisory"
  "$distlock" run --store "$pga" pg:adv -- sh -c "touch '$work/adv-held'; sleep 30" &
  aholder=$!
  pids+=("$aholder")
  eventually test -f "$work/adv-held"
  dl try --store "$pga" pg:adv
  check "try on an advisory lock held by another session exits 3" test $? -eq 3
  kill -TERM "$aholder"
  wait "$aholder"
  check "the advisory lock is free once its holder's session ended" dl try --store "$pga" pg:adv
  dl status --store "$pga" pg:adv >/dev/null 2>&1
  check "status with mode=advisory is a usage error (exit 2)" test $? -eq 2
  err=$(dl list --store "$pga" 2>&1)
  check "list with mode=advisory is a usage error (exit 2)" test $? -eq 2
  check "... saying why" matches "$err" "64-bit key"
  dl try --store "postgres://127.0.0.1/db?nosuchoption=1" x >/dev/null 2>&1
  check "a URL libpq does not accept is a usage error (exit 2)" test $? -eq 2
  err=$(dl try --store "$pgt&mode=advisory&mode=table" x 2>&1)
  check "a parameter given twice is a usage error (exit 2)" test $? -eq 2
  check "... saying so" matches "$err" "query key 'mode' is given twice"
  err=$(dl try --store "$pgt&mode=shared" x 2>&1)
  check "an unknown mode is a usage error, naming the modes" matches "$err" "'mode=shared': expected one of table, advisory"
fi

# --- --shared and --permits: a reader, a semaphore's permit (the in-process store).
out=$(dl run --store memory --shared catalog -- sh -c 'echo "$DISTLOCK_RESOURCE $DISTLOCK_FENCE"')
check "run --shared runs the command as a reader, with its fence" test "$out" = "catalog 1"
out=$(dl run --store memory --permits 3 exports -- sh -c 'echo "$DISTLOCK_SLOT $DISTLOCK_FENCE"')
check "run --permits 3 hands the command its permit's number" test "$out" = "0 1"
check "try --permits takes and gives back a permit" dl try --store memory --permits 1 exports
out=$(dl run --store "$store" --shared catalog -- sh -c 'echo "$DISTLOCK_FENCE"')
check "run --shared on Redis runs the command as a reader, with its fence" test "$out" -ge 1
out=$(dl run --store "$store" --permits 2 exports -- sh -c 'echo "$DISTLOCK_SLOT"')
check "run --permits 2 on Redis hands the command permit 0" test "$out" = "0"
err=$(dl run --store "$store" --store "$q1" --store "$q2" --shared catalog -- true 2>&1)
check "--shared on a Redlock quorum is a usage error (exit 2)" test $? -eq 2
check "... saying why" matches "$err" "not on a Redlock quorum"
dl run --shared --permits 2 x -- true 2>/dev/null
check "--shared with --permits is a usage error (exit 2)" test $? -eq 2

# --- bash completion (tools/cli/distlock.bash, installed with the tool).
completion="$(dirname "$0")/../../tools/cli/distlock.bash"
completes() { # expected, then the words of the line (the last one being completed)
  local expected=$1
  shift
  local got
  got=$(bash -c 'source "$1"; shift; COMP_WORDS=("$@"); COMP_CWORD=$((${#COMP_WORDS[@]} - 1)); _distlock;
                 echo "${COMPREPLY[*]}"' _ "$completion" "$@")
  [[ $got == "$expected" ]] || { echo "  completed '$*' as '$got', expected '$expected'" >&2; return 1; }
}
check "completion: the verbs" completes "run try status list release revoke help --help" distlock ""
check "completion: a verb's options" completes "--store --store-timeout" distlock run --st
check "completion: store schemes after --store" completes "etcd:// etcds://" distlock run --store e
check "completion: release takes --owner" completes "--store --owner" distlock release -
check "completion: revoke takes --fence and --owner" completes "--fence" distlock revoke --f

echo "$failures failure(s)"
exit $((failures > 0))
