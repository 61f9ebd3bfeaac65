#!/usr/bin/env python3
"""Plain-numpy reference of masque's int4 products (core/src/numerics/int4_product.hpp).

Writes OUT/int4_cases.json: for a few shapes and group sizes, random float32 weights, biases and
input rows (seeded), the 4-bit weights and bf16 scales the documented quantization gives, and
the outputs of the documented product: input rows quantized to int8 per row, per group the exact
int32 sum of the group's products, accumulated in float32 with a fused multiply-add times the
group's scale, times the row's scale, plus the bias.
"""
import json
import sys
from pathlib import Path

import numpy as np


def bf16_bits(x):
    """float32 -> bfloat16 bits, rounded to nearest even (finite values)."""
    u = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    one, sixteen = np.uint64(1), np.uint64(16)
    return ((u + np.uint64(0x7FFF) + ((u >> sixteen) & one)) >> sixteen).astype(np.uint16)


def widen(bits):
    return (np.asarray(bits, dtype=np.uint32) << np.uint32(16)).view(np.float32)


def quantize_weights(w, group):
    out, inp = w.shape
    scales = np.zeros((out, inp // group), dtype=np.uint16)
    q = np.zeros((out, inp), dtype=np.int8)
    for n in range(out):
        for g in range(inp // group):
            wg = w[n, g * group:(g + 1) * group]
            amax = np.float32(np.max(np.abs(wg)))
            s16 = bf16_bits(np.float32(amax / np.float32(7.0)))
            scales[n, g] = s16
            s = widen(s16)
            if s > 0:
                q[n, g * group:(g + 1) * group] = np.clip(np.rint(wg / s), -7, 7)
    nibbles = np.zeros((out, inp // 2), dtype=np.uint8)
    for n in range(out):
        for b in range(inp // 32):
            lo = q[n, b * 32:b * 32 + 16].astype(np.int32) + 8
            hi = q[n, b * 32 + 16:b * 32 + 32].astype(np.int32) + 8
            nibbles[n, b * 16:(b + 1) * 16] = (lo | (hi << 4)).astype(np.uint8)
    return q, nibbles, scales


def quantize_rows(x):
    scales = (np.max(np.abs(x), axis=1) / np.float32(127.0)).astype(np.float32)
    q = np.zeros(x.shape, dtype=np.int8)
    for m in range(x.shape[0]):
        if scales[m] > 0:
            inverse = np.float32(1.0) / scales[m]
            q[m] = np.clip(np.rint(x[m] * inverse), -127, 127)
    return q, scales


def fma32(a, b, c):
    """float32 fused multiply-add (exact in float64 for these operands, then rounded once)."""
    return np.float32(np.float64(a) * np.float64(b) + np.float64(c))


def product(qx, sx, q, scales, bias, group):
    rows, inp = qx.shape
    out = q.shape[0]
    y = np.zeros((rows, out), dtype=np.float32)
    for m in range(rows):
        for n in range(out):
            acc = np.float32(0.0)
            prod = qx[m].astype(np.int64) * q[n].astype(np.int64)
            for g in range(inp // group):
                d = int(np.sum(prod[g * group:(g + 1) * group]))
                acc = fma32(np.float32(d), widen(scales[n, g]), acc)
            f = np.float32
            y[m, n] = f(f(acc * sx[m]) + bias[n])
    return y


def main():
    out_dir = Path(sys.argv[1])
    out_dir.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(20261202)
    cases = []
    for out, inp, group, rows in [(40, 256, 32, 7), (24, 192, 64, 5), (17, 128, 128, 3)]:
        w = rng.normal(0.0, 0.1, (out, inp)).astype(np.float32)
        w[0, :32] = 0.0  # an all-zero group: scale 0
        bias = rng.normal(0.0, 0.1, out).astype(np.float32)
        x = rng.normal(0.0, 1.0, (rows, inp)).astype(np.float32)
        x[1] = 0.0  # an all-zero row
        q, nibbles, scales = quantize_weights(w, group)
        qx, sx = quantize_rows(x)
        y = product(qx, sx, q, scales, bias, group)
        cases.append({
            "out": out, "in": inp, "group": group, "rows": rows,
            "weight": [float(v) for v in w.ravel()],
            "bias": [float(v) for v in bias],
            "x": [float(v) for v in x.ravel()],
            "nibbles": [int(v) for v in nibbles.ravel()],
            "scales": [int(v) for v in scales.ravel()],
            "y": [float(v) for v in y.ravel()],
        })
    (out_dir / "int4_cases.json").write_text(json.dumps(cases))


if __name__ == "__main__":
    main()
