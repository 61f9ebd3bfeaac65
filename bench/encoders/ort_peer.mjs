// The ONNX Runtime side of bench/encoders: onnxruntime-node's bundled CPU library on an ONNX
// file that export_onnx.py wrote, fed token ids (nothing is tokenized here).
//
//   node ort_peer.mjs MODEL.onnx --ids IDS_FILE --batches BATCHES.json --threads N
//                     [--out VECTORS.f32] [--optimized-out OPT.onnx]
//
// IDS_FILE: one record per line, space-separated ids (what masque reads with --input-format
// ids). BATCHES.json: a list of batches, each a list of record numbers (0-based lines of
// IDS_FILE): bench.py cuts them as masque's runner does (windows sorted by length, then cut),
// so both sides run the same sequences in the same batches. A batch is padded to its longest
// record with id 0 and attention_mask 0.
//
// One process, one measurement, printed as JSON on stdout: load_seconds (the session made:
// graph optimisations at level "all", which fuse attention, gelu, layer norms and the
// quantized MatMuls), then every batch run once, in order, with no warm-up (masque's figure
// has none either): seconds (wall, the whole loop including building the input tensors) and
// cpu_seconds (this process's user + system time in that loop). --out: the `cls` vectors as
// records x hidden float32, in record order.
import fs from "node:fs";
import ort from "onnxruntime-node";

function parseArgs(argv) {
  const a = {threads: 1};
  a.model = argv[0];
  for (let i = 1; i < argv.length; i++) {
    const value = () => {
      if (i + 1 >= argv.length) throw new Error(`${argv[i]} needs a value`);
      return argv[++i];
    };
    switch (argv[i]) {
      case "--ids": a.ids = value(); break;
      case "--batches": a.batches = value(); break;
      case "--threads": a.threads = Number(value()); break;
      case "--out": a.out = value(); break;
      case "--optimized-out": a.optimizedOut = value(); break;
      default: throw new Error(`unknown argument ${argv[i]}`);
    }
  }
  if (!a.model || !a.ids || !a.batches) {
    throw new Error("usage: ort_peer.mjs MODEL.onnx --ids IDS_FILE --batches BATCHES.json ...");
  }
  return a;
}

const a = parseArgs(process.argv.slice(2));
const records = fs.readFileSync(a.ids, "utf8").split("\n").filter((l) => l.trim())
  .map((l) => l.trim().split(/\s+/).map(Number));
const batches = JSON.parse(fs.readFileSync(a.batches, "utf8"));
const now = () => performance.now() / 1e3;
const cpu = (from) => {
  const u = process.cpuUsage(from);
  return (u.user + u.system) / 1e6;
};

const loadStart = now();
// intra-op threads as asked, one inter-op thread (the graph runs sequentially, as a BERT
// forward is one chain of ops): the usual CPU setting for an encoder.
const session = await ort.InferenceSession.create(a.model, {
  executionProviders: ["cpu"], graphOptimizationLevel: "all", executionMode: "sequential",
  intraOpNumThreads: a.threads, interOpNumThreads: 1,
  ...(a.optimizedOut ? {optimizedModelFilePath: a.optimizedOut} : {}),
});
const loadSeconds = now() - loadStart;

let vectors = null, hidden = 0, padded = 0, tokens = 0;
const cpu0 = process.cpuUsage();
const t0 = now();
for (const batch of batches) {
  const length = Math.max(...batch.map((r) => records[r].length));
  const ids = new BigInt64Array(batch.length * length);
  const mask = new BigInt64Array(batch.length * length);
  batch.forEach((r, row) => {
    records[r].forEach((id, j) => {
      ids[row * length + j] = BigInt(id);
      mask[row * length + j] = 1n;
    });
    tokens += records[r].length;
  });
  padded += batch.length * length;
  const shape = [batch.length, length];
  const out = await session.run({input_ids: new ort.Tensor("int64", ids, shape),
                                 attention_mask: new ort.Tensor("int64", mask, shape)});
  const cls = out.cls;
  if (!vectors) {
    hidden = cls.dims[1];
    vectors = new Float32Array(records.length * hidden);
  }
  batch.forEach((r, row) => {
    vectors.set(cls.data.subarray(row * hidden, (row + 1) * hidden), r * hidden);
  });
}
const seconds = now() - t0;
const cpuSeconds = cpu(cpu0);
if (a.out && vectors) fs.writeFileSync(a.out, Buffer.from(vectors.buffer));
const pkg = JSON.parse(fs.readFileSync(new URL("./node_modules/onnxruntime-node/package.json",
                                               import.meta.url), "utf8"));
console.log(JSON.stringify({
  load_seconds: loadSeconds, seconds, cpu_seconds: cpuSeconds, records: records.length,
  batches: batches.length, tokens, padded_tokens: padded, hidden, threads: a.threads,
  version: pkg.version,
}));
