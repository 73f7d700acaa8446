// Apache Curator's lock recipes driven line by line, for test/interop/zookeeper.cpp.
//
// java CuratorLock CONNECT PATH KIND SESSION_MS
//   KIND: mutex (InterProcessMutex), read or write (InterProcessReadWriteLock's locks).
// Commands on stdin, one per line; one line out for each, flushed:
//   acquire MS  -> "held" or "timeout"
//   release     -> "released"
//   fence       -> "fence <czxid of this lock's node>" (the fence a Curator service reads)
// Errors print "error <message>". The session is the one Curator's client keeps; the
// process exits at the end of its input.
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessLock;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.framework.recipes.locks.InterProcessReadWriteLock;
import org.apache.curator.retry.RetryOneTime;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.concurrent.TimeUnit;

public final class CuratorLock {
    // InterProcessMutex keeps the path of its node to itself (getLockPath() is
    // protected): a service that wants the fence subclasses it, as here.
    static final class FencedMutex extends InterProcessMutex {
        FencedMutex(CuratorFramework client, String path) { super(client, path); }
        String nodePath() { return getLockPath(); }
    }

    public static void main(String[] args) throws Exception {
        if (args.length != 4) {
            System.err.println("usage: CuratorLock CONNECT PATH mutex|read|write SESSION_MS");
            System.exit(2);
        }
        final int sessionMs = Integer.parseInt(args[3]);
        CuratorFramework client = CuratorFrameworkFactory.newClient(args[0], sessionMs, 2000, new RetryOneTime(100));
        client.start();
        client.blockUntilConnected(10, TimeUnit.SECONDS);
        InterProcessLock lock;
        FencedMutex mutex = null;
        switch (args[2]) {
        case "mutex":
            mutex = new FencedMutex(client, args[1]);
            lock = mutex;
            break;
        case "read":
            lock = new InterProcessReadWriteLock(client, args[1]).readLock();
            break;
        case "write":
            lock = new InterProcessReadWriteLock(client, args[1]).writeLock();
            break;
        default:
            System.err.println("kind: mutex, read or write");
            System.exit(2);
            return;
        }
        System.out.println("ready");
        System.out.flush();
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        for (String line; (line = in.readLine()) != null;) {
            String[] words = line.trim().split(" ");
            try {
                if (words[0].equals("acquire")) {
                    boolean held = lock.acquire(Long.parseLong(words[1]), TimeUnit.MILLISECONDS);
                    System.out.println(held ? "held" : "timeout");
                } else if (words[0].equals("release")) {
                    lock.release();
                    System.out.println("released");
                } else if (words[0].equals("fence") && mutex != null) {
                    System.out.println("fence " + client.checkExists().forPath(mutex.nodePath()).getCzxid());
                } else {
                    System.out.println("error unknown command: " + line);
                }
            } catch (Exception e) {
                System.out.println("error " + e);
            }
            System.out.flush();
        }
        client.close();
    }
}
