// tiktoken's GPT-2 encoding on the same corpus as masque-bench-tokenizers, line by line, one
// thread: node bench.mjs CORPUS [--reps N]. Prints a RESULT line in the same format.
import { readFileSync } from "node:fs";
import { get_encoding } from "tiktoken";

const args = process.argv.slice(2);
const corpus = args[0];
const repsAt = args.indexOf("--reps");
const reps = repsAt >= 0 ? Number(args[repsAt + 1]) : 5;

const text = readFileSync(corpus, "utf8");
const lines = text.split("\n");
if (lines.length && lines[lines.length - 1] === "") lines.pop();
let bytes = 0;
for (const l of lines) bytes += Buffer.byteLength(l, "utf8");

const enc = get_encoding("gpt2");

function pass(keep) {
  const out = keep ? [] : null;
  let tokens = 0;
  const cpu0 = process.cpuUsage();
  const start = process.hrtime.bigint();
  for (const line of lines) {
    const ids = enc.encode_ordinary(line);
    tokens += ids.length;
    if (keep) out.push(ids);
  }
  const seconds = Number(process.hrtime.bigint() - start) / 1e9;
  const cpu = process.cpuUsage(cpu0);
  const cpuSeconds = (cpu.user + cpu.system) / 1e6;  // the whole process (GC threads included)
  return { seconds, cpuSeconds, tokens, out };
}

const first = pass(true);
// FNV-1a over all ids, as masque-bench-tokenizers computes it (outside the timed loop here).
let h = 1469598103934665603n;
const prime = 1099511628211n;
for (const ids of first.out) for (const id of ids) h = BigInt.asUintN(64, (h ^ BigInt(id)) * prime);

const wall = [];
const cpu = [];
for (let r = 0; r < reps; r++) {
  const p = pass(false);
  wall.push(bytes / 1e6 / p.seconds);
  cpu.push(bytes / 1e6 / p.cpuSeconds);
}
const median = (v) => v.sort((a, b) => a - b)[Math.floor(v.length / 2)];
console.log(
  `RESULT tiktoken-gpt2 ${median(wall).toFixed(2)} ${median(cpu).toFixed(2)} ` +
    `${(bytes / 1e6 / first.seconds).toFixed(2)} ` +
    `${first.tokens} ${h.toString(16).padStart(16, "0")}`,
);
enc.free();
