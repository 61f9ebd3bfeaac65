// Writes tests/tokenizers/data/unigram_ties.jsonl: Hugging Face tokenizers' (Rust, through
// @anush008/tokenizers) ids for t5-small's Unigram on texts whose segmentations tie in score
// (runs of one punctuation character, where "-"+"---" and "---"+"-" score the same), so the
// test can hold masque to the Rust library's tie-breaking.
// Usage: node unigram_tie_vectors.mjs ../../../shared/tokenizers-json/t5-small/tokenizer.json OUT
import { writeFileSync } from "node:fs";
import { Tokenizer } from "@anush008/tokenizers";

const [file, out] = process.argv.slice(2);
const tok = Tokenizer.fromFile(file);
const texts = [];
for (const ch of ["-", "_", "=", ".", "*", "#", "~", "+", "!", "?", "/", "0", "a"])
  for (let n = 1; n <= 40; ++n) texts.push(ch.repeat(n));
for (const n of [5, 9, 16, 23]) {
  texts.push("x" + "-".repeat(n), "-".repeat(n) + " y", "a--b" + "-".repeat(n) + "c");
}
const lines = [];
for (const text of texts) {
  const e = await tok.encode(text, null, { addSpecialTokens: false });
  lines.push(JSON.stringify({ text, ids: e.getIds() }));
}
writeFileSync(out, lines.join("\n") + "\n");
console.log(`${lines.length} vectors -> ${out}`);
