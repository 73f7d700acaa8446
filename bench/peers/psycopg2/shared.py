#!/usr/bin/env python3
"""PostgreSQL's advisory locks through psycopg2, as a worker of the shared workloads
(bench/shared_workloads.hpp): ROLE PORT KEY ROUNDS, ROLE one of reader, writer,
permit:N. Readers take pg_advisory_lock_shared, the writer pg_advisory_lock, on KEY;
a permit is the first of N advisory keys (KEY + 1 + slot) that pg_try_advisory_lock
grants, tried again after 1 ms. ROUNDS critical sections of 1 ms, printed on the
machine's monotonic clock once all are done."""
import sys
import time

import psycopg2


def main():
    role, port, key, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    conn = psycopg2.connect(host="127.0.0.1", port=port, dbname="postgres", user="postgres")
    conn.autocommit = True
    cur = conn.cursor()
    held = []
    for _ in range(rounds):
        asked = time.monotonic_ns()
        slot = -1
        if role.startswith("permit:"):
            permits = int(role[len("permit:"):])
            deadline = time.monotonic() + 60
            while slot < 0:
                for s in range(permits):
                    cur.execute("SELECT pg_try_advisory_lock(%s)", (key + 1 + s,))
                    if cur.fetchone()[0]:
                        slot = s
                        break
                if slot < 0:
                    if time.monotonic() > deadline:
                        sys.exit(1)
                    time.sleep(0.001)
        elif role == "writer":
            cur.execute("SELECT pg_advisory_lock(%s)", (key,))
        else:
            cur.execute("SELECT pg_advisory_lock_shared(%s)", (key,))
        acquired = time.monotonic_ns()
        time.sleep(0.001)
        released = time.monotonic_ns()
        if role.startswith("permit:"):
            cur.execute("SELECT pg_advisory_unlock(%s)", (key + 1 + slot,))
        elif role == "writer":
            cur.execute("SELECT pg_advisory_unlock(%s)", (key,))
        else:
            cur.execute("SELECT pg_advisory_unlock_shared(%s)", (key,))
        held.append((slot, asked, acquired, released))
        if role == "writer":
            time.sleep(0.005)
    conn.close()
    for slot, asked, acquired, released in held:
        if role.startswith("permit:"):
            print(f"permit {slot} {asked} {acquired} {released}")
        else:
            print(f"{'write' if role == 'writer' else 'read'} {asked} {acquired} {released}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
