// node-redlock (5.0.0-beta.2, on ioredis) taking one resource beside distlock, for
// test/interop/redis.cpp: the reference Redlock client, driven line by line.
//
// argv: MODULES_DIR PORTS RESOURCE TTL_MS RETRY_DELAY_MS [cluster]
//   MODULES_DIR     where node-redlock and ioredis are installed (its node_modules)
//   PORTS           comma-separated ports on 127.0.0.1: one Redis per Redlock node,
//                   or with "cluster" the seed nodes of one Redis Cluster
//   RESOURCE        the resource (node-redlock's key, as given)
//   TTL_MS          the lock's duration; never extended (no using()), so a holder
//                   that stops or is killed loses it after that long
//   RETRY_DELAY_MS  node-redlock's retryDelay (no jitter)
// Prints "ready" once connected. Commands on stdin, one answer line each:
//   acquire TIMEOUT_MS  -> "held" once taken, or "timeout" when node-redlock's tries
//                          (one every RETRY_DELAY_MS, for TIMEOUT_MS) all failed
//   release             -> "released", or "not-released" when no node had it
//   value               -> the held lock's value (node-redlock's random token)
//   quit                -> exits
// Each answer is written at once (one line, flushed), so the test sees each event
// as it happens.
import { createRequire } from "module";
import { createInterface } from "readline";
import { join } from "path";

const [modules, portList, resource, ttlText, delayText, mode] = process.argv.slice(2);
const ttl = Number(ttlText);
const retryDelay = Number(delayText);
const ports = (portList ?? "").split(",").map(Number);
if (!modules || !resource || !(ttl > 0) || !(retryDelay > 0) || ports.some((p) => !(p > 0 && p < 65536))) {
  console.error("usage: node redlock_lock.mjs MODULES_DIR PORTS RESOURCE TTL_MS RETRY_DELAY_MS [cluster]");
  process.exit(2);
}
const require = createRequire(join(modules, "package.json"));
const Redis = require("ioredis");
const Redlock = require("redlock").default;

const options = { lazyConnect: true, maxRetriesPerRequest: 0 };
const clients =
  mode === "cluster"
    ? [new Redis.Cluster(ports.map((port) => ({ host: "127.0.0.1", port })), { lazyConnect: true, redisOptions: options })]
    : ports.map((port) => new Redis({ host: "127.0.0.1", port, ...options }));
await Promise.all(clients.map((c) => c.connect()));
const redlock = new Redlock(clients, { retryCount: 0, retryDelay, retryJitter: 0 });
redlock.on("error", () => {}); // a refused try is reported here as well as counted

const say = (line) => new Promise((done) => process.stdout.write(line + "\n", done));
let lock = null;
await say("ready");
for await (const line of createInterface({ input: process.stdin })) {
  const [command, arg] = line.trim().split(/\s+/);
  if (command === "acquire") {
    // Tries at 0, d, 2d, ... while within the timeout: node-redlock's own retries.
    const retryCount = Math.max(0, Math.floor(Number(arg) / retryDelay));
    try {
      lock = await redlock.acquire([resource], ttl, { retryCount });
      await say("held");
    } catch {
      await say("timeout");
    }
  } else if (command === "release") {
    try {
      await redlock.release(lock, { retryCount: 0 });
      await say("released");
    } catch {
      await say("not-released");
    }
    lock = null;
  } else if (command === "value") {
    await say(lock ? lock.value : "none");
  } else if (command === "quit") {
    break;
  }
}
await Promise.all(clients.map((c) => c.quit().catch(() => {})));
process.exit(0);
