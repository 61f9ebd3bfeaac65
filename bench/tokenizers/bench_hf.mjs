// Peers for masque's tokenizer-json on the same corpus, line by line, one thread:
//   rust-json-NAME        Hugging Face tokenizers 0.22 (Rust) through @anush008/tokenizers:
//                         encode() per line (an async call into the native library)
//   rust-batch-json-NAME  the same library, encodeBatch() over 1,000 lines at a time with
//                         TOKENIZERS_PARALLELISM=false and RAYON_NUM_THREADS=1 (one thread; the
//                         per-call overhead of node is paid once per batch)
//   tfjs-json-NAME        transformers.js (@huggingface/transformers, pure JavaScript):
//                         AutoTokenizer from the local folder, encode() per line
// node bench_hf.mjs CORPUS --models llama3,qwen3 [--reps N] [--peers rust,rust-batch,tfjs]
// Prints RESULT lines in masque-bench-tokenizers' format (the checksum is over all ids).
import { readFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const shared = path.resolve(here, "../../../shared/tokenizers-json");
const args = process.argv.slice(2);
const corpus = args[0];
const opt = (name, fallback) => {
  const at = args.indexOf(name);
  return at >= 0 ? args[at + 1] : fallback;
};
const reps = Number(opt("--reps", "3"));
const models = opt("--models", "llama3,qwen3").split(",");
const peers = opt("--peers", "rust,rust-batch,tfjs").split(",");

const text = readFileSync(corpus, "utf8");
const lines = text.split("\n");
if (lines.length && lines[lines.length - 1] === "") lines.pop();
let bytes = 0;
for (const l of lines) bytes += Buffer.byteLength(l, "utf8");

function checksum(all) {
  let h = 1469598103934665603n;
  const prime = 1099511628211n;
  for (const ids of all) for (const id of ids) h = BigInt.asUintN(64, (h ^ BigInt(id)) * prime);
  return h.toString(16).padStart(16, "0");
}

// pass(keep) -> { seconds, cpuSeconds, tokens, out }
async function measure(name, pass) {
  const first = await pass(true);
  const sum = checksum(first.out);
  const wall = [];
  const cpu = [];
  for (let r = 0; r < reps; r++) {
    const p = await pass(false);
    wall.push(bytes / 1e6 / p.seconds);
    cpu.push(bytes / 1e6 / p.cpuSeconds);
  }
  const median = (v) => v.sort((a, b) => a - b)[Math.floor(v.length / 2)];
  console.log(
    `RESULT ${name} ${median(wall).toFixed(2)} ${median(cpu).toFixed(2)} ` +
      `${(bytes / 1e6 / first.seconds).toFixed(2)} ${first.tokens} ${sum}`,
  );
}

function timed(run) {
  return async (keep) => {
    const out = keep ? [] : null;
    const cpu0 = process.cpuUsage();
    const start = process.hrtime.bigint();
    const tokens = await run(out);
    const seconds = Number(process.hrtime.bigint() - start) / 1e9;
    const c = process.cpuUsage(cpu0);
    return { seconds, cpuSeconds: (c.user + c.system) / 1e6, tokens, out };
  };
}

for (const model of models) {
  const folder = path.join(shared, model);
  if (peers.includes("rust") || peers.includes("rust-batch")) {
    const { Tokenizer } = await import("@anush008/tokenizers");
    const tok = Tokenizer.fromFile(path.join(folder, "tokenizer.json"));
    const options = { addSpecialTokens: false };
    if (peers.includes("rust"))
      await measure(`rust-json-${model}`, timed(async (out) => {
        let tokens = 0;
        for (const line of lines) {
          const ids = (await tok.encode(line, null, options)).getIds();
          tokens += ids.length;
          if (out) out.push(ids);
        }
        return tokens;
      }));
    if (peers.includes("rust-batch"))
      await measure(`rust-batch-json-${model}`, timed(async (out) => {
        let tokens = 0;
        for (let i = 0; i < lines.length; i += 1000) {
          const encs = await tok.encodeBatch(lines.slice(i, i + 1000), options);
          for (const e of encs) {
            const ids = e.getIds();
            tokens += ids.length;
            if (out) out.push(ids);
          }
        }
        return tokens;
      }));
  }
  if (peers.includes("tfjs")) {
    const { AutoTokenizer, env } = await import("@huggingface/transformers");
    env.allowRemoteModels = false;
    env.localModelPath = shared + "/";
    const tok = await AutoTokenizer.from_pretrained(model);
    await measure(`tfjs-json-${model}`, timed(async (out) => {
      let tokens = 0;
      for (const line of lines) {
        const ids = tok.encode(line, { add_special_tokens: false });
        tokens += ids.length;
        if (out) out.push(ids);
      }
      return tokens;
    }));
  }
}
