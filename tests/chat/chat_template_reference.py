#!/usr/bin/python3
"""Reference renders for masque's chat templates, by python3-jinja2 (Debian's), in the
environment transformers' apply_chat_template renders with (utils/chat_template_utils.py):
an ImmutableSandboxedEnvironment with trim_blocks and lstrip_blocks, the loopcontrols
extension and a `generation` tag, its own tojson filter (json.dumps without HTML escaping,
ensure_ascii=False by default), raise_exception and strftime_now; the variables messages,
tools, documents (None), add_generation_prompt and the tokenizer config's special tokens
(`{**tokenizer.special_tokens_map, **kwargs}`).

Usage: chat_template_reference.py SHARED_TOKENIZERS_DIR OUT_DIR

Writes OUT_DIR/chat_expected.jsonl (each of conversations.jsonl through each of the five real
chat templates, with add_generation_prompt true and false), OUT_DIR/jinja_expected.jsonl
(each case of jinja_cases.txt) and OUT_DIR/jinja_random.jsonl (random templates mixing
whitespace control, blocks, loops, assignments, macros and raw blocks, with their renders).
A render that fails records the error's type and message.
"""

import json
import os
import random
import sys
from datetime import datetime

import jinja2
import jinja2.ext
import jinja2.nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment

HERE = os.path.dirname(os.path.abspath(__file__))
TEMPLATES = ["llama3", "qwen3", "deepseek-v3", "gemma3", "phi-3-mini"]
TOKEN_NAMES = ["bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token",
               "mask_token"]


class GenerationTag(jinja2.ext.Extension):
    """transformers' `{% generation %}...{% endgeneration %}`: the body renders as it is
    (transformers also records where it is, for assistant masks)."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_render"), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def environment():
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def strftime_now(format):
        return datetime.now().strftime(format)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[GenerationTag, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def token_text(value):
    """A special token as the config writes it: a string or an AddedToken dict."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("content"), str):
        return value["content"]
    return None


def add_special_tokens(specials, config):
    """What tokenizer.special_tokens_map holds: the tokens set (None and "" left out)."""
    for name in TOKEN_NAMES:
        if name in config:
            text = token_text(config[name])
            if text:
                specials[name] = text
    extra = config.get("additional_special_tokens")
    if isinstance(extra, list):
        tokens = [t for t in (token_text(x) for x in extra) if t is not None]
        if tokens:
            specials["additional_special_tokens"] = tokens
    named = config.get("extra_special_tokens")
    if isinstance(named, dict):
        for name, value in named.items():
            text = token_text(value)
            if text:
                specials[name] = text


def load_folder(folder):
    """The chat template and special tokens of a tokenizer folder, as from_pretrained reads
    them: chat_template.jinja over tokenizer_config.json's chat_template, and
    special_tokens_map.json over the config's tokens."""
    config = {}
    config_file = os.path.join(folder, "tokenizer_config.json")
    if os.path.exists(config_file):
        with open(config_file, encoding="utf-8") as f:
            config = json.load(f)
    specials = {}
    add_special_tokens(specials, config)
    map_file = os.path.join(folder, "special_tokens_map.json")
    if os.path.exists(map_file):
        with open(map_file, encoding="utf-8") as f:
            add_special_tokens(specials, json.load(f))
    jinja_file = os.path.join(folder, "chat_template.jinja")
    if os.path.exists(jinja_file):
        with open(jinja_file, encoding="utf-8") as f:
            return f.read(), specials
    template = config["chat_template"]
    if isinstance(template, list):
        template = {t["name"]: t["template"] for t in template}["default"]
    return template, specials


def outcome(render):
    try:
        return {"text": render()}
    except jinja2.exceptions.TemplateError as e:
        return {"error": type(e).__name__, "message": str(e)}
    except Exception as e:  # TypeError, ValueError, ...: the template failed on this input
        return {"error": type(e).__name__, "message": str(e)}


def render_conversations(tokenizers_dir, out):
    env = environment()
    with open(os.path.join(HERE, "conversations.jsonl"), encoding="utf-8") as f:
        conversations = [json.loads(line) for line in f if line.strip()]
    for name in TEMPLATES:
        source, specials = load_folder(os.path.join(tokenizers_dir, name))
        template = env.from_string(source)
        for conversation in conversations:
            for add_generation_prompt in (True, False):
                variables = {**specials, **conversation.get("extra", {})}

                def render():
                    return template.render(messages=conversation["messages"],
                                           tools=conversation.get("tools"), documents=None,
                                           add_generation_prompt=add_generation_prompt,
                                           **variables)

                record = {"template": name, "conversation": conversation["name"],
                          "add_generation_prompt": add_generation_prompt}
                record.update(outcome(render))
                out.write(json.dumps(record, ensure_ascii=False) + "\n")


def read_cases(path):
    """jinja_cases.txt: `=== NAME`, then `--- context` (a JSON object) and `--- template`
    (the text up to the next `===` line, its final newline included)."""
    cases, current, section = [], None, None
    with open(path, encoding="utf-8", newline="") as f:
        for line in f.read().split("\n")[:-1]:
            if line.startswith("=== "):
                current = {"name": line[4:].strip(), "context": "", "template": ""}
                cases.append(current)
                section = None
            elif line in ("--- context", "--- template") and current is not None:
                section = line[4:]
            elif current is not None and section is not None:
                current[section] += line + "\n"
    for case in cases:
        case["context"] = json.loads(case["context"]) if case["context"].strip() else {}
    return cases


def render_cases(out):
    env = environment()
    for case in read_cases(os.path.join(HERE, "jinja_cases.txt")):
        def render():
            return env.from_string(case["template"]).render(**case["context"])

        record = {"name": case["name"]}
        record.update(outcome(render))
        out.write(json.dumps(record, ensure_ascii=False) + "\n")


RANDOM_CONTEXT = {"x": " hi there ", "y": "Y", "n": 3, "l": [1, "two", 3.0],
                  "d": {"k": "v", "z": [None, True]}}
RANDOM_TEXT = [" ", "  ", "\n", "\n\n", "\t", " \n ", "\n  ", "  \n", "", "", "x", "ab",
               " y ", "\u00a0", "\u3000z"]
RANDOM_EXPRESSIONS = ["x", "y", "'s'", "n + 1", "l|length", "l[1:]", "d.k", "d['k']", "none",
                      "l", "d", "1.5", "x ~ n", "l|join(',')", "d|tojson", "'a' if n else 'b'",
                      "not x", "missing", "x|trim", "x.split()", "l[::-1]|list", "n // 2",
                      "range(3)|list", "y ~ 'q'"]


class RandomTemplate:
    """Templates to stress the lexer's whitespace rules and the scopes: random text around
    tags with random whitespace control, nested if/for, set, macros, with, set blocks."""

    def __init__(self, seed):
        self.rng = random.Random(seed)

    def text(self):
        return "".join(self.rng.choice(RANDOM_TEXT) for _ in range(self.rng.randint(0, 4)))

    def sign(self):
        return self.rng.choice(["", "", "-", "+"])

    def block(self, depth):
        r, out = self.rng, []
        for _ in range(r.randint(1, 4)):
            out.append(self.text())
            p = r.random()
            if p < 0.3:
                v = r.choice(["", "", "-"])
                out.append("{{%s %s %s}}" % (v, r.choice(RANDOM_EXPRESSIONS), r.choice(["", "", "-"])))
            elif p < 0.45:
                out.append("{#%s c %s#}" % (self.sign(), self.sign()))
            elif p < 0.75 and depth < 3:
                test = r.choice(["true", "false", "n", "x", "l", "missing is defined"])
                out.append("{%%%s if %s %s%%}" % (self.sign(), test, self.sign()))
                out.append(self.block(depth + 1))
                if r.random() < 0.4:
                    out.append("{%%%s else %s%%}" % (self.sign(), self.sign()))
                    out.append(self.block(depth + 1))
                out.append("{%%%s endif %s%%}" % (self.sign(), self.sign()))
            elif p < 0.9 and depth < 3:
                items = r.choice(["l", "range(2)", "d", "'ab'"])
                out.append("{%%%s for i in %s %s%%}" % (self.sign(), items, self.sign()))
                out.append(self.block(depth + 1))
                if r.random() < 0.3:
                    out.append("{{ loop.index }}")
                out.append("{%%%s endfor %s%%}" % (self.sign(), self.sign()))
            elif p < 0.95:
                out.append("{%%%s raw %s%%}%s{{ y }}%s{%%%s endraw %s%%}" % (
                    self.sign(), r.choice(["", "-"]), self.text(), self.text(), self.sign(),
                    self.sign()))
            elif p < 0.97:
                out.append("{%%%s set %s = %s %s%%}" % (
                    self.sign(), r.choice(["x", "n", "y", "l"]), r.choice(RANDOM_EXPRESSIONS),
                    self.sign()))
            elif p < 0.98 and depth < 3:
                out.append("{%% macro m%d(a, b='B') %%}[{{ a }}{{ b }}{{ x }}{{ y }}]%s"
                           "{%% endmacro %%}{{ m%d(n) }}" % (depth, self.block(depth + 1), depth))
            elif p < 0.99 and depth < 3:
                out.append("{%% with y = x %%}%s{%% endwith %%}" % self.block(depth + 1))
            else:
                out.append("{%% set y %%}%s{%% endset %%}{{ y|length }}" % self.block(depth + 1))
        out.append(self.text())
        return "".join(out)


def render_random(out, count=1500, seed=48):
    env = environment()
    generator = RandomTemplate(seed)
    for _ in range(count):
        source = generator.block(0)
        record = {"template": source, "context": RANDOM_CONTEXT}
        record.update(outcome(lambda: env.from_string(source).render(**RANDOM_CONTEXT)))
        out.write(json.dumps(record, ensure_ascii=False) + "\n")


def main():
    tokenizers_dir, out_dir = sys.argv[1], sys.argv[2]
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "chat_expected.jsonl"), "w", encoding="utf-8") as out:
        render_conversations(tokenizers_dir, out)
    with open(os.path.join(out_dir, "jinja_expected.jsonl"), "w", encoding="utf-8") as out:
        render_cases(out)
    with open(os.path.join(out_dir, "jinja_random.jsonl"), "w", encoding="utf-8") as out:
        render_random(out)


if __name__ == "__main__":
    main()
