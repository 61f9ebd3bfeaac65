#!/usr/bin/python3
"""Checks masque's constrained outputs: every record's text must parse as JSON (python3's json)
and be valid under the schema, by a validator of masque's JSON-schema subset written here
(docs/instruct.md), independent of masque's grammar.

    json_schema_check.py SCHEMA.json OUTPUT.jsonl [FIELD] [--allow-errors]
    json_schema_check.py --self-test

Prints `line N: why` for each invalid record and a last line
`checked N, valid V, invalid I, error-records E`; exit 0 when every record is valid (error
records allowed only with --allow-errors).
"""
import json
import re
import sys

ANNOTATIONS = {"title", "description", "$schema", "$id", "examples", "default", "$comment"}


def type_ok(value, t):
    if t == "object":
        return isinstance(value, dict)
    if t == "array":
        return isinstance(value, list)
    if t == "string":
        return isinstance(value, str)
    if t == "boolean":
        return isinstance(value, bool)
    if t == "null":
        return value is None
    if t == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if t == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    raise ValueError(f"unknown type {t}")


def same(a, b):
    """JSON equality: true is not 1."""
    return type(a) == type(b) and a == b if isinstance(a, bool) or isinstance(b, bool) else a == b


def problems(value, schema, where="$"):
    if schema is True or schema == {}:
        return []
    if "const" in schema:
        return [] if same(value, schema["const"]) else [f"{where}: not the const"]
    if "enum" in schema:
        return [] if any(same(value, e) for e in schema["enum"]) else [f"{where}: not in enum"]
    types = schema.get("type")
    if types is None:
        keys = set(schema) - ANNOTATIONS
        types = (["object"] if keys & {"properties", "required", "additionalProperties"} else
                 ["array"] if keys & {"items", "minItems", "maxItems"} else
                 ["string"] if keys & {"minLength", "maxLength", "pattern"} else None)
        if types is None:
            return []
    types = types if isinstance(types, list) else [types]
    matching = [t for t in types if type_ok(value, t)]
    if not matching:
        return [f"{where}: {json.dumps(value)[:40]} is not of type {types}"]
    out = []
    if isinstance(value, dict):
        props = schema.get("properties", {})
        for name in schema.get("required", []):
            if name not in value:
                out.append(f"{where}: missing required '{name}'")
        if "properties" in schema:
            for name in value:
                if name not in props:
                    out.append(f"{where}: extra property '{name}'")
        for name, sub in props.items():
            if name in value:
                out += problems(value[name], sub, f"{where}.{name}")
    elif isinstance(value, list):
        if len(value) < schema.get("minItems", 0):
            out.append(f"{where}: fewer than minItems")
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            out.append(f"{where}: more than maxItems")
        for i, item in enumerate(value):
            out += problems(item, schema.get("items", True), f"{where}[{i}]")
    elif isinstance(value, str):
        if len(value) < schema.get("minLength", 0):
            out.append(f"{where}: shorter than minLength")
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            out.append(f"{where}: longer than maxLength")
        if "pattern" in schema and not re.fullmatch(schema["pattern"].strip("^$"), value):
            out.append(f"{where}: does not match the pattern")
    return out


def self_test():
    schema = {"type": "object", "required": ["a"],
              "properties": {"a": {"type": "integer"}, "b": {"type": "array", "maxItems": 1,
                                                             "items": {"enum": ["x"]}},
                             "c": {"type": "string", "pattern": "^[a-z]{2}$"}}}
    cases = [({"a": 1}, True), ({"a": 1, "b": ["x"], "c": "ok"}, True), ({}, False),
             ({"a": True}, False), ({"a": 1.5}, False), ({"a": 1, "b": ["x", "x"]}, False),
             ({"a": 1, "b": ["y"]}, False), ({"a": 1, "c": "abc"}, False),
             ({"a": 1, "d": 0}, False)]
    bad = [c for c, ok in cases if (not problems(c, schema)) != ok]
    print("self-test:", "ok" if not bad else f"wrong on {bad}")
    return 1 if bad else 0


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    if "--self-test" in sys.argv:
        return self_test()
    schema = json.load(open(args[0]))
    field = args[2] if len(args) > 2 else "text"
    checked = valid = invalid = errors = 0
    with open(args[1]) as f:
        for n, line in enumerate(f, 1):
            record = json.loads(line)
            checked += 1
            if "error" in record:
                errors += 1
                continue
            try:
                why = problems(json.loads(record[field]), schema)
            except json.JSONDecodeError as e:
                why = [f"not JSON: {e}"]
            if why:
                invalid += 1
                print(f"line {n}: {'; '.join(why)}")
            else:
                valid += 1
    print(f"checked {checked}, valid {valid}, invalid {invalid}, error-records {errors}")
    ok = invalid == 0 and (errors == 0 or "--allow-errors" in sys.argv) and checked > 0
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
