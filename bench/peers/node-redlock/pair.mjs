// node-redlock (v5, on ioredis) making the pair that distlock's rows make in
// bench/redis.cpp: acquire SET fresh keys together on every node (one key: the
// Redlock rows; 32 on one node: lock_all's), release them, one pair at a time. Its
// acquire and release each return once a quorum has answered, as distlock's do.
//
// argv: COUNT SET PORT [PORT...] (redis-servers on 127.0.0.1). Prints one line, "us",
// the seconds the timed pairs took, then each timed pair's microseconds, and exits.
// At most COUNT pairs and 20 seconds, after 1,000 untimed ones.
import Redis from "ioredis";
import Redlock from "redlock";

const [count, set, ...ports] = process.argv.slice(2).map(Number);
if (!(count > 0) || !(set > 0) || ports.length === 0 || ports.some((p) => !(p > 0 && p < 65536))) {
  console.error("usage: node pair.mjs COUNT SET PORT [PORT...]");
  process.exit(2);
}
const clients = ports.map((port) => new Redis({ host: "127.0.0.1", port, lazyConnect: true, maxRetriesPerRequest: 0 }));
await Promise.all(clients.map((c) => c.connect()));
const redlock = new Redlock(clients, { retryCount: 0 });

async function pair(key) {
  const keys = set === 1 ? [key] : Array.from({ length: set }, (_, k) => `${key}:${k}`);
  const lock = await redlock.acquire(keys, 10000);
  await lock.release();
}

for (let i = 0; i < 1000; ++i) await pair(`peer-warm:${i}`);
const us = [];
const start = process.hrtime.bigint();
for (let i = 0; i < count && process.hrtime.bigint() - start < 20_000_000_000n; ++i) {
  const t0 = process.hrtime.bigint();
  await pair(`peer:${i}`);
  us.push(Number(process.hrtime.bigint() - t0) / 1000);
}
const seconds = Number(process.hrtime.bigint() - start) / 1e9;
process.stdout.write(`us ${seconds} ${us.map((x) => x.toFixed(1)).join(" ")}\n`);
await Promise.all(clients.map((c) => c.quit()));
