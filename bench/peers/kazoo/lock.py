#!/usr/bin/env python3
"""kazoo's Lock recipe, the reference client beside distlock's mutex in
bench/zookeeper.cpp, printing the lines of the benchmark's own workers:

  pair PORT PATH COUNT
      Lock(PATH/<pid>/<n>).acquire() + release(), each pair on a fresh lock path, in one
      session, after 100 untimed pairs; at most COUNT timed pairs and 20 s. Prints one
      line, "us SECONDS US...": the timed pairs' seconds, then each pair's microseconds.
  contend PORT PATH ROUNDS START_NS
      Lock(PATH) (bench/handoff.hpp): from START_NS on CLOCK_MONOTONIC on, ROUNDS
      critical sections of 1 ms, printed once all are done as
      "held ACQUIRED_NS RELEASED_NS UNLOCKED_NS" on CLOCK_MONOTONIC.

The session's timeout is distlock's default (10 s)."""
import os
import sys
import time

from kazoo.client import KazooClient

WARMUP = 100
LIMIT_NS = 20 * 10**9
LOCK_TIMEOUT_S = 60


def monotonic_ns():
    # The machine's one monotonic clock, which the benchmark's workers print too.
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)


def pair(zk, path, count):
    # The pid keeps a round's paths apart from an earlier round's.
    base = f"{path}/{os.getpid()}"

    def once(name):
        lock = zk.Lock(f"{base}/{name}")
        if not lock.acquire(timeout=LOCK_TIMEOUT_S):
            sys.exit("kazoo: a lock on a fresh path was not granted")
        lock.release()

    for i in range(WARMUP):
        once(f"warm-{i}")
    us = []
    start = time.perf_counter_ns()
    for i in range(count):
        if time.perf_counter_ns() - start >= LIMIT_NS:
            break
        t0 = time.perf_counter_ns()
        once(str(i))
        us.append((time.perf_counter_ns() - t0) / 1000)
    seconds = (time.perf_counter_ns() - start) / 1e9
    print(f"us {seconds:f} " + " ".join(f"{x:.1f}" for x in us))


def contend(zk, path, rounds, start_ns):
    lock = zk.Lock(path)
    # Connected first: the processes contend from the same instant, whatever each took
    # to start (an interpreter and its imports take a while).
    wait = start_ns - monotonic_ns()
    if wait > 0:
        time.sleep(wait / 1e9)
    held = []
    status = 0
    for _ in range(rounds):
        if not lock.acquire(timeout=LOCK_TIMEOUT_S):
            status = 1
            break
        acquired = monotonic_ns()
        time.sleep(0.001)
        released = monotonic_ns()
        lock.release()
        held.append((acquired, released, monotonic_ns()))
    sys.stdout.write("".join(f"held {a} {r} {u}\n" for a, r, u in held))
    return status


def main():
    args = sys.argv[1:]
    if len(args) not in (4, 5) or args[0] not in ("pair", "contend") or (args[0] == "contend") != (len(args) == 5):
        sys.exit(__doc__)
    mode, port, path = args[0], args[1], args[2]
    zk = KazooClient(hosts=f"127.0.0.1:{port}", timeout=10.0)
    zk.start(timeout=20)
    try:
        if mode == "pair":
            pair(zk, path, int(args[3]))
            status = 0
        else:
            status = contend(zk, path, int(args[3]), int(args[4]))
    finally:
        zk.stop()
        zk.close()
    sys.stdout.flush()
    sys.exit(status)


if __name__ == "__main__":
    main()
