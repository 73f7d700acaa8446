#!/usr/bin/env python3
"""kazoo's read-write lock and semaphore recipes, as a worker of the shared workloads
(bench/shared_workloads.hpp): ROLE PORT PATH ROUNDS, ROLE one of reader, writer,
permit:N; ROUNDS critical sections of 1 ms, printed on the machine's monotonic clock
(the clock of the C++ workers) once all are done."""
import sys
import time

from kazoo.client import KazooClient


def main():
    role, port, path, rounds = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    zk = KazooClient(hosts=f"127.0.0.1:{port}")
    zk.start(timeout=20)
    def recipe_for_role():
        if role.startswith("permit:"):
            return zk.Semaphore(path + "/semaphore", max_leases=int(role[len("permit:"):]))
        if role == "writer":
            return zk.WriteLock(path + "/rw")
        return zk.ReadLock(path + "/rw")

    held = []
    for _ in range(rounds):
        recipe = recipe_for_role()  # one recipe object per critical section
        asked = time.monotonic_ns()
        if not recipe.acquire(timeout=20):
            sys.exit(1)
        acquired = time.monotonic_ns()
        time.sleep(0.001)
        released = time.monotonic_ns()
        recipe.release()
        held.append((asked, acquired, released))
        if role == "writer":
            time.sleep(0.005)
    zk.stop()
    for asked, acquired, released in held:
        if role.startswith("permit:"):
            print(f"permit -1 {asked} {acquired} {released}")
        else:
            print(f"{'write' if role == 'writer' else 'read'} {asked} {acquired} {released}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
