// node-redlock (v5, on ioredis) as one of the 8 contender processes of bench/redis.cpp's
// processes rows: it takes one key until a shared counter in Redis reaches SECTIONS,
// each critical section a GET/SET increment of the counter. With node-redlock's own
// retry settings (a try every 200 ms ± 100 ms), up to 300 tries (about a minute).
//
// argv: PORT SECTIONS RESOURCE. Speaks what the benchmark's own contenders speak:
// prints "ready", waits for a line on stdin, then prints "asked granted released 0"
// per critical section (CLOCK_MONOTONIC in ns, the clock of the benchmark's steady
// clock), "last asked granted" for the wait that found the work done (or "last asked
// now" when the tries ran out), then "done". Starts no section after 60 seconds.
import Redis from "ioredis";
import Redlock from "redlock";
import { createInterface } from "readline";

const [port, sections] = process.argv.slice(2, 4).map(Number);
const resource = process.argv[4];
if (!(port > 0 && port < 65536) || !(sections > 0) || !resource) {
  console.error("usage: node contend.mjs PORT SECTIONS RESOURCE");
  process.exit(2);
}
const client = new Redis({ host: "127.0.0.1", port, lazyConnect: true, maxRetriesPerRequest: 0 });
await client.connect();
const redlock = new Redlock([client], { retryCount: 300 });
redlock.on("error", () => {}); // a refused try is reported here as well as retried

const lines = createInterface({ input: process.stdin });
process.stdout.write("ready\n");
await new Promise((go) => lines.once("line", go));
lines.close();

const counter = `${resource}:counter`;
const start = process.hrtime.bigint();
let out = "";
// A release is tried once: a lost one expires with its TTL.
const release = (lock) => redlock.release(lock, { retryCount: 0 }).catch(() => {});
while (process.hrtime.bigint() - start < 60_000_000_000n) {
  const asked = process.hrtime.bigint();
  let lock;
  try {
    lock = await redlock.acquire([`${resource}:lock`], 10000);
  } catch {
    out += `last ${asked} ${process.hrtime.bigint()}\n`;
    break;
  }
  const granted = process.hrtime.bigint();
  const n = Number((await client.get(counter)) ?? 0);
  if (n >= sections) {
    await release(lock);
    out += `last ${asked} ${granted}\n`;
    break;
  }
  await client.set(counter, String(n + 1));
  const released = process.hrtime.bigint();
  await release(lock);
  out += `${asked} ${granted} ${released} 0\n`;
}
// Written once at the end: writing to the pipe inside the loop would slow the holder.
process.stdout.write(`${out}done\n`);
await client.quit();
