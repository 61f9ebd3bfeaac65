// The llama.cpp side of bench/peers: node-llama-cpp's prebuilt CPU binary on a GGUF file,
// fed token ids directly (the GGUF's vocabulary is synthetic; nothing is tokenized).
//
//   node llama_peer.mjs MODEL.gguf --threads N --prompt IDS_FILE [--new-tokens 128]
//                       [--block ID,...] [--kv-type F16|F32] [--flash-attention auto|on|off]
//                       [--logits K --logits-out FILE]
//
// One process, one measurement, printed as JSON on stdout:
// - load: the model file opened (memory-mapped, as llama.cpp does by default) and a context of
//   1,024 positions with 512-token batches made (load_seconds, not part of any rate);
// - prefill: the prompt's ids (one line of IDS_FILE) evaluated in one batch with logits for the
//   last position only, and the first token chosen greedily (prefill_seconds);
// - decode: new-tokens - 1 further greedy steps at batch 1, one token each (decode_seconds over
//   decode_steps), with the ids of --block (the end tokens) never chosen, so that every run
//   generates exactly new-tokens tokens;
// - with --logits K: no timing; the log-probabilities (log-softmax of the logits, full
//   vocabulary) of the prompt's first K positions, written to FILE as K x vocab float32.
// --kv-type: the type of the KV cache (default llama.cpp's own, F16) and --flash-attention
// (default auto, which is on for the CPU and converts Q, K and V to F16); the f32 logits check
// runs with F32 and off, llama.cpp's attention in f32 throughout.
import fs from "node:fs";
import {getLlama, LlamaLogLevel, TokenBias} from "node-llama-cpp";

function parseArgs(argv) {
  const a = {newTokens: 128, block: [], logits: 0, threads: 1, kvType: "",
             flashAttention: "auto"};
  a.model = argv[0];
  for (let i = 1; i < argv.length; i++) {
    const value = () => {
      if (i + 1 >= argv.length) throw new Error(`${argv[i]} needs a value`);
      return argv[++i];
    };
    switch (argv[i]) {
      case "--threads": a.threads = Number(value()); break;
      case "--prompt": a.prompt = value(); break;
      case "--new-tokens": a.newTokens = Number(value()); break;
      case "--block": a.block = value().split(",").filter(Boolean).map(Number); break;
      case "--kv-type": a.kvType = value(); break;
      case "--flash-attention": a.flashAttention = value(); break;
      case "--logits": a.logits = Number(value()); break;
      case "--logits-out": a.logitsOut = value(); break;
      default: throw new Error(`unknown argument ${argv[i]}`);
    }
  }
  if (!a.model || !a.prompt) {
    throw new Error("usage: llama_peer.mjs MODEL.gguf --prompt IDS_FILE ...");
  }
  return a;
}

const a = parseArgs(process.argv.slice(2));
const prompt = fs.readFileSync(a.prompt, "utf8").trim().split(/\s+/).map(Number);
const now = () => performance.now() / 1e3;
// CPU seconds of this process since `from` (all its threads): robust to other processes
// sharing the machine, where wall time is not.
const cpu = (from) => {
  const u = process.cpuUsage(from);
  return (u.user + u.system) / 1e6;
};

const loadStart = now();
// build: "never": the prebuilt binary of @node-llama-cpp/linux-x64 or nothing (no compiling).
const llama = await getLlama({gpu: false, build: "never", logLevel: LlamaLogLevel.error,
                              maxThreads: a.threads});
const model = await llama.loadModel({modelPath: a.model});
const context = await model.createContext({
  contextSize: 1024, batchSize: 512, sequences: 1, threads: {ideal: a.threads, min: a.threads},
  ...(a.flashAttention === "auto" ? {} : {flashAttention: a.flashAttention === "on"}),
  ...(a.kvType ? {experimentalKvCacheKeyType: a.kvType, experimentalKvCacheValueType: a.kvType}
    : {}),
});
const sequence = context.getSequence();
const out = {
  load_seconds: now() - loadStart, threads: context.currentThreads,
  flash_attention: context.flashAttention, kv_type: a.kvType || "default (F16)",
  cpu_math_cores: llama.cpuMathCores,
  build: llama.buildType, system_info: llama.systemInfo,
};

if (a.logits > 0) {
  const k = Math.min(a.logits, prompt.length);
  const items = prompt.slice(0, k).map((t) => [t, {generateNext: {probabilities: true}}]);
  const results = await sequence.controlledEvaluate(items);
  const rows = [];
  for (let i = 0; i < k; i++) {
    const p = results[i].next.probabilities;  // Map token -> softmax probability, all tokens
    const row = new Float32Array(p.size);
    for (const [token, prob] of p) row[token] = Math.log(prob);
    rows.push(row);
  }
  const buf = Buffer.alloc(rows.length * rows[0].length * 4);
  rows.forEach((r, i) => Buffer.from(r.buffer).copy(buf, i * r.length * 4));
  fs.writeFileSync(a.logitsOut, buf);
  out.logits_positions = k;
  out.vocab = rows[0].length;
} else {
  const bias = new TokenBias(model.tokenizer);
  for (const t of a.block) bias.set(t, "never");
  const generator = sequence.evaluate(prompt, {temperature: 0, tokenBias: bias,
                                               yieldEogToken: true});
  const tokens = [];
  let t = now();
  let c = process.cpuUsage();
  let step = await generator.next();
  out.prefill_seconds = now() - t;
  out.prefill_cpu_seconds = cpu(c);
  out.prefill_tokens = prompt.length;
  tokens.push(step.value);
  t = now();
  c = process.cpuUsage();
  while (tokens.length < a.newTokens) {
    step = await generator.next();
    if (step.done) break;
    tokens.push(step.value);
  }
  out.decode_seconds = now() - t;
  out.decode_cpu_seconds = cpu(c);
  out.decode_steps = tokens.length - 1;
  await generator.return();
  out.tokens = tokens;
}
const status = fs.readFileSync("/proc/self/status", "utf8");
out.vm_hwm_kb = Number(/VmHWM:\s+(\d+)/.exec(status)[1]);
process.stdout.write(JSON.stringify(out) + "\n");
await context.dispose();
await model.dispose();
await llama.dispose();
