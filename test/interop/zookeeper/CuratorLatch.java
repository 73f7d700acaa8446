// Apache Curator's LeaderLatch driven line by line, for test/interop/zookeeper.cpp.
//
// java CuratorLatch CONNECT PATH ID SESSION_MS
// Commands on stdin, one per line; one line out for each, flushed:
//   start       -> "started": a new LeaderLatch(PATH, ID) joins the election
//   await MS    -> "leader" or "waiting" (LeaderLatch.await)
//   has         -> "has true" or "has false" (hasLeadership())
//   leader      -> "leader-id <id>" (getLeader(): the lowest participant's id), or
//                  "no-leader" when no participant leads
//   fence       -> "fence <czxid of this participant's node>"
//   stop        -> "closed": the leadership window is ended first (a service stops its
//                  leader's work before it gives the latch up), then the latch closed
//   windows     -> "windows S:E S:E ..." this process's leadership windows, in
//                  System.nanoTime() (CLOCK_MONOTONIC on Linux, the clock the test
//                  reads), from the leader callback to stop; an open one is "S:-"
// Errors print "error <message>". The process exits at the end of its input.
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.leader.LeaderLatch;
import org.apache.curator.framework.recipes.leader.LeaderLatchListener;
import org.apache.curator.framework.recipes.leader.Participant;
import org.apache.curator.retry.RetryOneTime;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;

public final class CuratorLatch {
    // Leadership windows: starts and ends in nanoTime, -1 for an end not yet reached.
    private static final List<long[]> windows = new ArrayList<>();

    // From the leader callback, or from await() seeing leadership first (the callback
    // runs later, on Curator's executor): once per window.
    private static synchronized void began()
    {
        if (windows.isEmpty() || windows.get(windows.size() - 1)[1] >= 0)
            windows.add(new long[] {System.nanoTime(), -1});
    }

    private static synchronized void ended()
    {
        if (!windows.isEmpty() && windows.get(windows.size() - 1)[1] < 0)
            windows.get(windows.size() - 1)[1] = System.nanoTime();
    }

    private static synchronized String listed()
    {
        StringBuilder out = new StringBuilder("windows");
        for (long[] w : windows)
            out.append(' ').append(w[0]).append(':').append(w[1] < 0 ? "-" : Long.toString(w[1]));
        return out.toString();
    }

    public static void main(String[] args) throws Exception {
        if (args.length != 4) {
            System.err.println("usage: CuratorLatch CONNECT PATH ID SESSION_MS");
            System.exit(2);
        }
        final int sessionMs = Integer.parseInt(args[3]);
        CuratorFramework client = CuratorFrameworkFactory.newClient(args[0], sessionMs, 2000, new RetryOneTime(100));
        client.start();
        client.blockUntilConnected(10, TimeUnit.SECONDS);
        LeaderLatch latch = null;
        System.out.println("ready");
        System.out.flush();
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        for (String line; (line = in.readLine()) != null;) {
            String[] words = line.trim().split(" ");
            try {
                if (words[0].equals("start")) {
                    latch = new LeaderLatch(client, args[1], args[2]);
                    latch.addListener(new LeaderLatchListener() {
                        @Override public void isLeader() { began(); }
                        @Override public void notLeader() { ended(); }
                    });
                    latch.start();
                    System.out.println("started");
                } else if (words[0].equals("windows")) {
                    System.out.println(listed());
                } else if (latch == null) {
                    System.out.println("error not started");
                } else if (words[0].equals("await")) {
                    boolean led = latch.await(Long.parseLong(words[1]), TimeUnit.MILLISECONDS);
                    if (led)
                        began();
                    System.out.println(led ? "leader" : "waiting");
                } else if (words[0].equals("has")) {
                    System.out.println("has " + latch.hasLeadership());
                } else if (words[0].equals("leader")) {
                    Participant p = latch.getLeader();
                    System.out.println(p.isLeader() ? "leader-id " + p.getId() : "no-leader");
                } else if (words[0].equals("fence")) {
                    System.out.println("fence " + client.checkExists().forPath(latch.getOurPath()).getCzxid());
                } else if (words[0].equals("stop")) {
                    ended();
                    latch.close();
                    latch = null;
                    System.out.println("closed");
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
