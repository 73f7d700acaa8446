"""kazoo's lock recipes driven line by line, for test/interop/zookeeper.cpp.

/usr/bin/python3 kazoo_lock.py HOSTS PATH KIND SESSION_MS
  KIND: mutex (Lock), read (ReadLock) or write (WriteLock).
Commands on stdin, one per line; one line out for each, flushed:
  acquire MS  -> "held" or "timeout"
  release     -> "released"
  fence       -> "fence <czxid of this lock's node>"
Errors print "error <message>". The process exits at the end of its input.
"""
import sys

from kazoo.client import KazooClient
from kazoo.exceptions import LockTimeout


def main():
    if len(sys.argv) != 5:
        sys.stderr.write("usage: kazoo_lock.py HOSTS PATH mutex|read|write SESSION_MS\n")
        return 2
    hosts, path, kind, session_ms = sys.argv[1:]
    client = KazooClient(hosts=hosts, timeout=int(session_ms) / 1000.0)
    client.start(timeout=10)
    make = {"mutex": client.Lock, "read": client.ReadLock, "write": client.WriteLock}.get(kind)
    if make is None:
        sys.stderr.write("kind: mutex, read or write\n")
        return 2
    lock = make(path)
    print("ready", flush=True)
    for line in sys.stdin:
        words = line.split()
        try:
            if words[:1] == ["acquire"]:
                # kazoo raises LockTimeout when the time runs out (its node deleted).
                try:
                    held = lock.acquire(blocking=True, timeout=int(words[1]) / 1000.0)
                except LockTimeout:
                    held = False
                print("held" if held else "timeout", flush=True)
            elif words[:1] == ["release"]:
                lock.release()
                print("released", flush=True)
            elif words[:1] == ["fence"]:
                _, stat = client.get(path + "/" + lock.node)
                print("fence %d" % stat.czxid, flush=True)
            else:
                print("error unknown command: " + line.strip(), flush=True)
        except Exception as e:  # reported to the test, which decides
            print("error %r" % (e,), flush=True)
    client.stop()
    client.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
