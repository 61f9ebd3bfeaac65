// Writes tests/tokenizers/data/tokenizer_json_components.jsonl: the ids Hugging Face tokenizers
// 0.22 (Rust, through npm @anush008/tokenizers) gives for small synthetic tokenizer.json files
// (tests/fuzz/corpus/tokenizer_json/*.json) that use the components the six real files of
// ../shared/tokenizers-json do not (WordPiece, WordLevel, Unigram with a tiny Precompiled
// charsmap, Whitespace, Digits, Punctuation, Split MergedWithNext, BertPreTokenizer, NFD,
// Lowercase, StripAccents, Strip, NFKC, Bert/Roberta processing, single_word/lstrip/rstrip added
// tokens, byte fallback). Run once after changing those files: node component_vectors.mjs
import { readFileSync, writeFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { Tokenizer } from "@anush008/tokenizers";

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, "../..");
const files = ["bpe-byte-level", "bpe-sentencepiece", "unigram-precompiled", "wordpiece", "wordlevel"];
const texts = [
  "", "Hello world", "ABC abc hello world 12 x-y café", "  Hello,   World!  ", "aB ab ABBA b-a-b",
  "Let's go 12345 times\n\nok", "lowlow low  low\tlow", "Caf\u00e9 CAF\u00c9 cafe\u0301 \uff21\uff22",
  "<|endoftext|>ab<|endoftext|>", "x <tool> y<tool>z  <tool>  w", "abc</s>  ab </s>x",
  "é😁 ab", "hello.world!!1", "\u00bd \u2460 \u0663", "a\u00a0b\u2003c", "wor wor##ld world",
];
const out = [];
for (const name of files) {
  const file = path.join(root, "tests/fuzz/corpus/tokenizer_json", name + ".json");
  const tok = Tokenizer.fromFile(file);
  for (const text of texts)
    for (const addSpecialTokens of [false, true]) {
      const e = await tok.encode(text, null, { addSpecialTokens });
      const ids = e.getIds();
      out.push({ file: name, text, add_special_tokens: addSpecialTokens, ids,
                 decoded: await tok.decode(ids, false), decoded_skip: await tok.decode(ids, true) });
    }
}
writeFileSync(path.join(root, "tests/tokenizers/data/tokenizer_json_components.jsonl"),
              out.map((o) => JSON.stringify(o)).join("\n") + "\n");
console.log(`wrote ${out.length} vectors`);
