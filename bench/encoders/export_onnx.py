#!/usr/bin/python3
"""ONNX files of a BertModel folder's weights, for the ONNX Runtime side of bench/encoders.

    export_onnx.py FOLDER OUT_F32.onnx [--int8 OUT_INT8.onnx] [--per-channel]

The network is a plain-torch transcription of Hugging Face's modeling_bert.py (BertModel,
absolute positions, eval mode): embeddings = LayerNorm(word + token type 0 + position), then per
layer BertSelfAttention (q, k, v; softmax(q k^T / sqrt(d) + extended mask) v, the extended mask
(1 - attention_mask) * finfo(float32).min as get_extended_attention_mask makes it), BertSelfOutput
(LayerNorm(dense + input)), BertIntermediate (exact erf gelu), BertOutput (LayerNorm(dense +
attention output)). The weights are read from the folder's model.safetensors by the small reader
below (8-byte little-endian header length, JSON header, raw data).

Inputs input_ids and attention_mask (int64, [batch, sequence], both axes dynamic); one output,
`cls`: the last hidden state of the first token ([batch, hidden]), the pooling masque's embed
task does with task.pooling=cls (BertModel's pooler, tanh(dense(.)), is not applied: masque's
embed does not apply it either). Checked with onnx.checker.

--int8 also writes the graph ORT's `quantize_dynamic` makes of it by default (QOperator format,
weight type QInt8, per_channel False, reduce_range False): every MatMul with a constant 2-D B
becomes DynamicQuantizeLinear(input) -> uint8 input, scale and zero point (one per tensor, per
call); MatMulInteger(input_q, B_q, input_zp, B_zp) with B_q int8 symmetric, scale
max|B| / 127 and zero point 0; Cast to float; Mul(that, input_scale * B_scale). A
DynamicQuantizeLinear is shared by the MatMuls that read the same tensor (q, k and v), as the
quantizer does. ORT fuses the pattern into DynamicQuantizeMatMul at its extended optimisation
level. --per-channel: one scale per output column of B (quantize_dynamic's per_channel=True).
The attention's own products (B not constant) and the embedding gathers stay f32 (the
quantizer would also quantize the Gather's table; that changes its memory, not its speed).
"""
import argparse
import json
import math
import struct
import sys

import numpy as np
import torch

DTYPES = {"F32": np.float32, "F16": np.float16, "BF16": None}


def read_safetensors(path):
    """name -> float32 torch tensor (F32, F16 or BF16 files)."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        raw = data[begin:end]
        if info["dtype"] == "BF16":  # the high half of a float32
            x = np.frombuffer(raw, dtype=np.uint16).astype(np.uint32) << 16
            x = x.view(np.float32)
        else:
            x = np.frombuffer(raw, dtype=DTYPES[info["dtype"]]).astype(np.float32)
        out[name] = torch.from_numpy(x.reshape(info["shape"]).copy())
    return out


class Bert(torch.nn.Module):
    def __init__(self, config, weights):
        super().__init__()
        self.c = config
        prefix = "bert." if "bert.embeddings.word_embeddings.weight" in weights else ""
        # Registered as parameters so that the exporter makes them initializers.
        self.w = torch.nn.ParameterDict({
            k[len(prefix):].replace(".", "__"): torch.nn.Parameter(v, requires_grad=False)
            for k, v in weights.items() if k.startswith(prefix) and not k.startswith(
                prefix + "pooler.")})

    def p(self, name):
        return self.w[name.replace(".", "__")]

    def linear(self, name, x):
        return torch.nn.functional.linear(x, self.p(name + ".weight"), self.p(name + ".bias"))

    def norm(self, name, x):
        return torch.nn.functional.layer_norm(x, (self.c["hidden_size"],), self.p(name + ".weight"),
                                              self.p(name + ".bias"), self.c["layer_norm_eps"])

    def forward(self, input_ids, attention_mask):
        c = self.c
        batch, length = input_ids.shape
        heads = c["num_attention_heads"]
        d = c["hidden_size"] // heads
        positions = torch.arange(length, dtype=torch.long, device=input_ids.device)
        x = (torch.nn.functional.embedding(input_ids, self.p("embeddings.word_embeddings.weight"))
             + self.p("embeddings.position_embeddings.weight")[positions].unsqueeze(0)
             + self.p("embeddings.token_type_embeddings.weight")[0])
        x = self.norm("embeddings.LayerNorm", x)
        # get_extended_attention_mask: 0 where a key may be seen, the float minimum where not
        extended = (1.0 - attention_mask[:, None, None, :].to(torch.float32)) * \
            torch.finfo(torch.float32).min
        for l in range(c["num_hidden_layers"]):
            p = f"encoder.layer.{l}."

            def split(t):
                return t.view(batch, length, heads, d).transpose(1, 2)
            q = split(self.linear(p + "attention.self.query", x))
            k = split(self.linear(p + "attention.self.key", x))
            v = split(self.linear(p + "attention.self.value", x))
            scores = q @ k.transpose(-1, -2) / math.sqrt(d) + extended
            att = (torch.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(batch, length, -1)
            x = self.norm(p + "attention.output.LayerNorm",
                          self.linear(p + "attention.output.dense", att) + x)
            inner = torch.nn.functional.gelu(self.linear(p + "intermediate.dense", x))
            x = self.norm(p + "output.LayerNorm", self.linear(p + "output.dense", inner) + x)
        return x[:, 0, :]


def export(folder, out):
    with open(f"{folder}/config.json") as f:
        config = json.load(f)
    if config.get("position_embedding_type", "absolute") != "absolute":
        sys.exit("export_onnx: only absolute position embeddings")
    model = Bert(config, read_safetensors(f"{folder}/model.safetensors")).eval()
    ids = torch.tensor([[101, 7592, 2088, 102], [101, 2088, 102, 0]])
    mask = (ids != 0).long()
    with torch.no_grad():
        torch.onnx.export(model, (ids, mask), out, input_names=["input_ids", "attention_mask"],
                          output_names=["cls"], opset_version=17, do_constant_folding=True,
                          dynamic_axes={"input_ids": {0: "batch", 1: "sequence"},
                                        "attention_mask": {0: "batch", 1: "sequence"},
                                        "cls": {0: "batch"}})


def quantize_dynamic(src, out, per_channel):
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    model = onnx.load(src)
    g = model.graph
    inits = {t.name: t for t in g.initializer}
    nodes, done, quantized_inputs = [], set(), {}
    for node in g.node:
        b = node.input[1] if node.op_type == "MatMul" else None
        if b not in inits or len(inits[b].dims) != 2:
            nodes.append(node)
            continue
        x = node.input[0]
        if x not in quantized_inputs:  # one DynamicQuantizeLinear per quantized tensor
            names = (x + "_quantized", x + "_scale", x + "_zero_point")
            nodes.append(helper.make_node("DynamicQuantizeLinear", [x], list(names),
                                          x + "_QuantizeLinear"))
            quantized_inputs[x] = names
        xq, xs, xz = quantized_inputs[x]
        w = numpy_helper.to_array(inits[b]).astype(np.float32)  # [K, N]
        absmax = np.abs(w).max(axis=0) if per_channel else np.array(np.abs(w).max())
        scale = np.where(absmax > 0, absmax / 127.0, 1.0).astype(np.float32)
        wq = np.clip(np.rint(w / scale), -127, 127).astype(np.int8)
        zp = np.zeros(scale.shape, dtype=np.int8)
        if b not in done:
            g.initializer.extend([numpy_helper.from_array(wq, b + "_quantized"),
                                  numpy_helper.from_array(scale, b + "_scale"),
                                  numpy_helper.from_array(zp, b + "_zero_point")])
            done.add(b)
        y = node.output[0]
        nodes += [
            helper.make_node("MatMulInteger", [xq, b + "_quantized", xz, b + "_zero_point"],
                             [y + "_output_quantized"], node.name + "_quant"),
            helper.make_node("Cast", [y + "_output_quantized"], [y + "_cast_output"],
                             node.name + "_cast", to=TensorProto.FLOAT),
            helper.make_node("Mul", [xs, b + "_scale"], [y + "_scales"], node.name + "_scales_mul"),
            helper.make_node("Mul", [y + "_cast_output", y + "_scales"], [y],
                             node.name + "_output_scale_mul")]
    used = {i for n in nodes for i in n.input}
    keep = [t for t in g.initializer if t.name in used]
    del g.initializer[:]
    g.initializer.extend(keep)
    del g.node[:]
    g.node.extend(nodes)
    onnx.save(model, out)
    return len(done)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("folder")
    ap.add_argument("out")
    ap.add_argument("--int8")
    ap.add_argument("--per-channel", action="store_true")
    a = ap.parse_args()
    import onnx
    torch.set_num_threads(1)
    export(a.folder, a.out)
    onnx.checker.check_model(a.out)
    print(f"export_onnx: wrote {a.out}", file=sys.stderr)
    if a.int8:
        n = quantize_dynamic(a.out, a.int8, a.per_channel)
        onnx.checker.check_model(a.int8)
        print(f"export_onnx: wrote {a.int8} ({n} MatMuls int8, "
              f"{'per channel' if a.per_channel else 'per tensor'})", file=sys.stderr)


if __name__ == "__main__":
    main()
