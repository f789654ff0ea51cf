#!/usr/bin/env python3
"""Where bfloat16 inference loses accuracy: each product's rounding emulated on its own.

    python bench/bf16_ablation.py --weights DIR --text books --sentences 200 shipped float64 \\
        enc=f32,input=bf16,state=f32,proj=f32 enc=b10,input=b10,state=b10,proj=b10

Every variant is compared with the model's own float32 path (per-token cosine, 1st percentile,
per layer, and layer by layer per sentence-length bucket). Variants:

* ``shipped``: ``set_inference_precision("bfloat16")`` as it is;
* ``float64``: the model cast to float64 (how far float32 itself is from exact);
* ``enc=E,input=M,state=M,proj=M``: the LSTM's input, recurrent and output-projection products
  (and with ``enc`` the char CNN, highway and projection products) under one rounding each,
  emulated in float32 (slow: for accuracy only, never for speed):
  ``f32`` none; ``bf16`` inputs, weights and result rounded to bfloat16 (the kernels' own
  behaviour); ``w`` / ``x`` / ``o`` only the weights / inputs / result; ``wx`` weights and
  inputs, float32 result; ``split`` weights as two bfloat16 terms (hi + lo), inputs bfloat16,
  float32 result; ``bK`` inputs, weights and result rounded to K significant bits (bfloat16
  has 8). ``enc`` also takes ``bf16`` (the shipped bfloat16 encoder) and ``f32``.

Writes ``--json`` and prints one line per variant. Uses ``bench/bf16.py``'s texts.
"""
from __future__ import annotations

import argparse
import copy
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Tuple

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bf16 as bench_bf16  # noqa: E402  (bench/bf16.py)
from bench_common import write_results  # noqa: E402

BF16 = torch.bfloat16


def round_bits(t: torch.Tensor, bits: int) -> torch.Tensor:
    """``t`` rounded to ``bits`` significant bits (bfloat16: 8), float32."""
    mantissa, exponent = torch.frexp(t)
    return torch.ldexp(torch.round(mantissa * 2.0**bits) / 2.0**bits, exponent)


_ROUNDED: Dict[Tuple[int, str], torch.Tensor] = {}  # weights rounded once per (weight, rounding)


def _weight(w: torch.Tensor, how: str) -> torch.Tensor:
    key = (w.data_ptr(), how)
    if key not in _ROUNDED:
        if how == "bf16":
            _ROUNDED[key] = w.to(BF16).float()
        elif how == "lo":
            _ROUNDED[key] = (w - _weight(w, "bf16")).to(BF16).float()
        else:
            _ROUNDED[key] = round_bits(w, int(how))
    return _ROUNDED[key]


def product(x: torch.Tensor, w: torch.Tensor, mode: str) -> torch.Tensor:
    """``x @ w`` (both float32, ``w`` ``[in, out]``) with ``mode``'s rounding (see the module doc)."""
    r = lambda t: t.to(BF16).float()  # noqa: E731
    if mode == "f32":
        return x @ w
    if mode == "bf16":
        return r(r(x) @ _weight(w, "bf16"))
    if mode == "w":
        return x @ _weight(w, "bf16")
    if mode == "x":
        return r(x) @ w
    if mode == "o":
        return r(x @ w)
    if mode == "wx":
        return r(x) @ _weight(w, "bf16")
    if mode == "split":
        return r(x) @ _weight(w, "bf16") + r(x) @ _weight(w, "lo")
    if mode.startswith("b") and mode[1:].isdigit():
        bits = int(mode[1:])
        return round_bits(round_bits(x, bits) @ _weight(w, mode[1:]), bits)
    raise SystemExit(f"unknown product mode {mode!r}")


class Emulated:
    """Replacements for :func:`spacy_elmo.kernels.bf16.run_layer` and ``encode_tokens`` that round
    as the variant says (float32 arithmetic otherwise, the same maths as the float32 path)."""

    def __init__(self, spec: Dict[str, str], shipped_encode) -> None:
        self.spec, self.shipped_encode = spec, shipped_encode

    def encode_tokens(self, encoder, weights, char_ids):
        mode = self.spec.get("enc", "bf16")
        if mode == "bf16":
            return self.shipped_encode(encoder, weights, char_ids)
        if mode == "f32":
            return encoder(char_ids)
        return torch.cat([self._encode(encoder, part, mode) for part in char_ids.split(256)])

    @staticmethod
    def _encode(encoder, char_ids, mode):
        x = encoder.char_embedding(char_ids)  # [N, chars, dim]
        pooled = []
        for conv in encoder.convs:
            w = conv.weight  # [filters, dim, width]
            cols = x.unfold(1, w.shape[2], 1)  # [N, positions, dim, width]
            y = product(cols.reshape(-1, w.shape[1] * w.shape[2]), w.reshape(w.shape[0], -1).t(), mode)
            pooled.append(y.view(len(char_ids), -1, w.shape[0]).amax(1) + conv.bias)
        h = torch.cat(pooled, -1)
        h = torch.relu(h) if encoder.activation == "relu" else torch.tanh(h)
        for highway in encoder.highways:
            transformed = torch.relu(product(h, highway.transform.weight.t(), mode) + highway.transform.bias)
            gate = torch.sigmoid(product(h, highway.carry.weight.t(), mode) + highway.carry.bias)
            h = gate * transformed + (1 - gate) * h
        if isinstance(encoder.projection, torch.nn.Linear):
            return product(h, encoder.projection.weight.t(), mode) + encoder.projection.bias
        return h

    def run_layer(self, stack, layer, weights, prefix, inputs, active, n_steps, h, c):
        modes = [self.spec.get(k, "bf16") for k in ("input", "state", "proj")]
        batch, width = h.shape[1], inputs.shape[2]
        h, c = h.clone(), c.clone()
        out = h.new_zeros(width, 2, batch, stack.proj_dim)
        projected = torch.stack([product(inputs[d], layer.w_input[d], modes[0]) for d in range(2)])
        bias = layer.bias.unsqueeze(1)
        for t in range(n_steps):
            n = active[t]
            recurrent = torch.stack([product(h[d, :n], layer.w_state[d], modes[1]) for d in range(2)])
            i, j, f, o = (bias + projected[:, :n, t] + recurrent).chunk(4, dim=-1)
            c_n = torch.sigmoid(f) * c[:, :n] + torch.sigmoid(i) * torch.tanh(j)
            if stack.cell_clip:
                c_n = c_n.clamp(-stack.cell_clip, stack.cell_clip)
            c[:, :n] = c_n
            g = torch.tanh(c_n) * torch.sigmoid(o)
            h_new = torch.stack([product(g[d], layer.w_proj[d], modes[2]) for d in range(2)])
            if stack.proj_clip:
                h_new = h_new.clamp(-stack.proj_clip, stack.proj_clip)
            h[:, :n] = h_new
            out[t, :, :n] = h_new
        return out.permute(1, 2, 0, 3), (h, c)


POSITION_BUCKETS = ((0, 10), (10, 20), (20, 40), (40, 60), (60, 1000))


def error_by_position(sentences, ref: List[np.ndarray], fast: List[np.ndarray]) -> List[Dict[str, Any]]:
    """Median relative error ``|fast - ref| / |ref|`` of the last layer's forward half (the
    forward LM) by the token's position from the sentence start, i.e. by recurrent steps run:
    a recurrence that amplifies perturbations shows it growing geometrically with position,
    whatever the perturbation's source."""
    half = ref[0].shape[-1] // 2 if ref else 0
    rows = []
    for lo, hi in POSITION_BUCKETS:
        errors = [
            np.linalg.norm(b[-1, lo:hi, :half].astype(np.float64) - a[-1, lo:hi, :half], axis=-1)
            / np.maximum(np.linalg.norm(a[-1, lo:hi, :half].astype(np.float64), axis=-1), 1e-30)
            for a, b in zip(ref, fast)
            if len(a[-1]) > lo
        ]
        if errors:
            errors = np.concatenate(errors)
            rows.append({"positions": [lo, hi - 1], "tokens": len(errors), "median_relative_error": float(np.median(errors))})
    return rows


def run_variant(bilm, sentences, variant: str, batch: int) -> List[np.ndarray]:
    from spacy_elmo.kernels import bf16

    if variant == "float64":
        wide = copy.deepcopy(bilm).double()
        return [a.astype(np.float32) for a in wide.embed_sentences(sentences, batch_size=batch)]
    saved = bf16.run_layer, bf16.encode_tokens
    if variant != "shipped":
        try:
            spec = dict(part.split("=", 1) for part in variant.split(","))
        except ValueError:
            raise SystemExit(f"variant {variant!r}: expected shipped, float64 or key=mode,... (see --help)") from None
        emulated = Emulated(spec, bf16.encode_tokens)
        bf16.run_layer, bf16.encode_tokens = emulated.run_layer, emulated.encode_tokens
    try:
        bilm.set_inference_precision("bfloat16")
        return bilm.embed_sentences(sentences, batch_size=batch)
    finally:
        bilm.set_inference_precision("float32")
        bf16.run_layer, bf16.encode_tokens = saved


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("variants", nargs="+")
    bench_bf16.add_model_options(ap, sentences=200)
    ap.add_argument("--recurrent-gain", type=float, default=1.0,
                    help="scale every LSTM layer's recurrent weights by this first (e.g. 0.5: a random model whose recurrence no longer amplifies errors)")
    args = ap.parse_args()
    bilm, sentences = bench_bf16.load_model_and_sentences(args)
    bilm.set_token_cache(0)  # every variant computes every token
    if args.recurrent_gain != 1.0:
        with torch.no_grad():
            for layer in bilm.lstm.layers:
                layer.w_state.mul_(args.recurrent_gain)
    ref = bilm.embed_sentences(sentences, batch_size=args.batch)
    report: Dict[str, Any] = {
        "weights": Path(args.weights).name if args.weights else "en_default",
        "text": args.text, "sentences": len(sentences), "tokens": sum(map(len, sentences)),
        "batch": args.batch, "recurrent_gain": args.recurrent_gain, "torch": torch.__version__, "variants": {},
    }
    print(f"{report['weights']}, {args.text}: {report['sentences']} sentences, {report['tokens']} tokens, recurrent weights x{args.recurrent_gain}", flush=True)
    for variant in args.variants:
        start = time.perf_counter()
        out = run_variant(bilm, sentences, variant, args.batch)
        cos = bench_bf16.layer_cosines(ref, out)
        buckets = bench_bf16.cosine_by_length(sentences, ref, out)
        growth = error_by_position(sentences, ref, out)
        report["variants"][variant] = {"cosine": cos, "by_length": buckets, "error_by_position": growth}
        p1 = " / ".join(f"{c['p1']:.5f}" for c in cos)
        last = " ".join(f"{b['lengths'][0]}-{b['lengths'][1]}: {b['p1'][-1]:.4f}" for b in buckets)
        print(f"{variant:45s} p1 per layer {p1} | last layer p1 by length {last} ({time.perf_counter() - start:.0f} s)", flush=True)
        print("    last layer, forward LM: median relative error by position "
              + " ".join(f"{g['positions'][0]}-{g['positions'][1]}: {g['median_relative_error']:.1e}" for g in growth), flush=True)
        if args.json:
            write_results(args.json, report)


if __name__ == "__main__":
    main()
