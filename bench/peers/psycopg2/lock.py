#!/usr/bin/env python3
"""psycopg2 taking the locks people write by hand on PostgreSQL, the reference client
beside distlock's mutex in bench/postgres.cpp, printing the lines of the benchmark's
own workers. One connection, autocommit; every wait bounded by lock_timeout.

  advisory PORT COUNT
      pg_advisory_lock(k) + pg_advisory_unlock(k), a fresh key k for each pair.
  lease PORT COUNT
      a lease table of its own (peer_leases), one statement each way, a fresh
      resource and owner for each pair:
        INSERT ... ON CONFLICT (resource) DO UPDATE ... WHERE l.expires_at < now()
        DELETE ... WHERE resource = $1 AND owner = $2
  fenced PORT COUNT
      the least a fenced advisory lock writes: pg_advisory_lock(k) and, in the same
      statement, the key's fence counter incremented (a table of its own,
      peer_fences), then pg_advisory_unlock(k); a fresh key k for each pair.
  All three: after 100 untimed pairs, at most COUNT timed pairs and 20 s; prints one line,
  "us SECONDS US...": the timed pairs' seconds, then each pair's microseconds.
  contend PORT KEY ROUNDS START_NS [fenced]
      pg_advisory_lock(KEY), waiting in the server (bench/handoff.hpp): from START_NS on
      CLOCK_MONOTONIC on, ROUNDS critical sections of 1 ms, printed once all are done
      as "held ACQUIRED_NS RELEASED_NS UNLOCKED_NS" on CLOCK_MONOTONIC; with
      "fenced", each grant increments the fence counter as the fenced pairs do."""
import os
import sys
import time

import psycopg2

WARMUP = 100
LIMIT_NS = 20 * 10**9

LEASE_TABLE = ("CREATE TABLE IF NOT EXISTS peer_leases (resource text PRIMARY KEY, owner text NOT NULL, "
               "expires_at timestamptz NOT NULL)")
# distlock's lease TTL by default (10 s).
ACQUIRE = ("INSERT INTO peer_leases AS l (resource, owner, expires_at) VALUES (%s, %s, now() + interval '10 seconds') "
           "ON CONFLICT (resource) DO UPDATE SET owner = excluded.owner, expires_at = excluded.expires_at "
           "WHERE l.expires_at < now() RETURNING l.owner")
RELEASE = "DELETE FROM peer_leases WHERE resource = %s AND owner = %s"
FENCE_TABLE = "CREATE TABLE IF NOT EXISTS peer_fences (key bigint PRIMARY KEY, fence bigint NOT NULL)"
# The lock, then the fence, in one statement: the fence is taken only once the lock is.
FENCED_LOCK = ("WITH l AS MATERIALIZED (SELECT pg_advisory_lock(%(k)s)) INSERT INTO peer_fences AS f (key, fence) "
               "SELECT %(k)s, 1 FROM l ON CONFLICT (key) DO UPDATE SET fence = f.fence + 1 RETURNING f.fence")


def monotonic_ns():
    # The machine's one monotonic clock, which the benchmark's workers print too.
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)


def connect(port):
    conn = psycopg2.connect(host="127.0.0.1", port=int(port), user="postgres", dbname="postgres", sslmode="disable",
                            connect_timeout=10)
    conn.autocommit = True
    cur = conn.cursor()
    cur.execute("SET lock_timeout = '60s'")
    return conn, cur


def pairs(cur, mode, count):
    # The pid keeps a round's keys apart from an earlier round's.
    pid = os.getpid()
    if mode == "lease":
        cur.execute(LEASE_TABLE)
    if mode == "fenced":
        cur.execute(FENCE_TABLE)

    def advisory(n):
        key = (pid << 32) + n
        cur.execute("SELECT pg_advisory_lock(%s)", (key,))
        cur.fetchone()
        cur.execute("SELECT pg_advisory_unlock(%s)", (key,))
        if not cur.fetchone()[0]:
            sys.exit("psycopg2: pg_advisory_unlock released nothing")

    def lease(n):
        resource, owner = f"peer:{pid}:{n}", os.urandom(16).hex()
        cur.execute(ACQUIRE, (resource, owner))
        if cur.fetchone() is None:
            sys.exit("psycopg2: a fresh resource's lease was refused")
        cur.execute(RELEASE, (resource, owner))
        if cur.rowcount != 1:
            sys.exit("psycopg2: the release deleted no lease")

    def fenced(n):
        key = (pid << 32) + n
        cur.execute(FENCED_LOCK, {"k": key})
        if cur.fetchone() is None:
            sys.exit("psycopg2: a fenced grant returned no fence")
        cur.execute("SELECT pg_advisory_unlock(%s)", (key,))
        if not cur.fetchone()[0]:
            sys.exit("psycopg2: pg_advisory_unlock released nothing")

    once = {"advisory": advisory, "lease": lease, "fenced": fenced}[mode]
    for i in range(WARMUP):
        once(i)
    us = []
    start = time.perf_counter_ns()
    for i in range(WARMUP, WARMUP + count):
        if time.perf_counter_ns() - start >= LIMIT_NS:
            break
        t0 = time.perf_counter_ns()
        once(i)
        us.append((time.perf_counter_ns() - t0) / 1000)
    seconds = (time.perf_counter_ns() - start) / 1e9
    print(f"us {seconds:f} " + " ".join(f"{x:.1f}" for x in us))
    return 0


def contend(cur, key, rounds, start_ns, fenced):
    # Connected first: the processes contend from the same instant, whatever each took
    # to start (an interpreter and its imports take a while).
    wait = start_ns - monotonic_ns()
    if wait > 0:
        time.sleep(wait / 1e9)
    held = []
    status = 0
    for _ in range(rounds):
        try:
            if fenced:
                cur.execute(FENCED_LOCK, {"k": key})
            else:
                cur.execute("SELECT pg_advisory_lock(%s)", (key,))
            cur.fetchone()
        except psycopg2.Error as e:
            print(f"psycopg2: {e}", file=sys.stderr)
            status = 1
            break
        acquired = monotonic_ns()
        time.sleep(0.001)
        released = monotonic_ns()
        cur.execute("SELECT pg_advisory_unlock(%s)", (key,))
        if not cur.fetchone()[0]:
            status = 1
            break
        held.append((acquired, released, monotonic_ns()))
    sys.stdout.write("".join(f"held {a} {r} {u}\n" for a, r, u in held))
    return status


def main():
    args = sys.argv[1:]
    if not ((len(args) == 3 and args[0] in ("advisory", "lease", "fenced")) or
            (len(args) in (5, 6) and args[0] == "contend" and args[5:] in ([], ["fenced"]))):
        sys.exit(__doc__)
    conn, cur = connect(args[1])
    try:
        if args[0] == "contend":
            if args[5:]:
                cur.execute(FENCE_TABLE)
            status = contend(cur, int(args[2]), int(args[3]), int(args[4]), bool(args[5:]))
        else:
            status = pairs(cur, args[0], int(args[2]))
    finally:
        conn.close()
    sys.stdout.flush()
    sys.exit(status)


if __name__ == "__main__":
    main()
