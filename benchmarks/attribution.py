"""Seconds per example and completeness error of attribution at the paper's shape.

Side by side in one run, on the same random-init BERT-base-shaped classifier and inputs (with
BERT's initialisation its F(αA) is smooth, unlike that of a fine-tuned model:
benchmarks/quadrature.py measures those; --init 0.05 gives a random model whose F is not):
  * naive: what the official code does — every layer recomputed from the embeddings, one
    example at a time, its m = 20 right-Riemann copies in one batch;
  * the engine (cached hidden states below layer l, scaled copies batched) with the paper's
    Riemann-20, Gauss-Legendre at 6 nodes, and its default rule (adaptive, tolerance 1e-3)
    with the default scan of 8 intervals and coarser ones of 4 and 2.
Examples are attributed one per round, every variant in a rotated order, so that load from
other jobs falls on all variants alike. Prints one JSON object; `speedup` is naive seconds /
variant seconds (machines here are noisy, so compare ratios); `target` checks the engine's
default against the naive loop (>= 6x faster at a smaller median completeness error).

With --shard-examples N it also attributes N examples end to end as an attribute job does
(`attribute_end_to_end`: model and dev split read from disk, the engine's dump rows
(`attnlab.engine.dump_rows`) at batch size `--batch-size`, auto by default, dump written):
examples/s, peak memory, the FLOPs the passes did (estimated from the model's shape and each
example's gradient nodes) and their share of the device's peak; `gpu_target` checks >= 100
examples/s. With --precision tf32 or bf16 the same examples are attributed in fp32 too (not
timed), and `accuracy_vs_fp32` says how far the dump's per-head maxima, F and the
completeness residual moved.
Usage: python benchmarks/attribution.py [--device cuda] [--shard-examples 2000] [--tokens 128]
       [--precision bf16] [--out benchmarks/results/attribution-h100.json] ...
"""

from __future__ import annotations

import argparse
import contextlib
import inspect
import io
import tempfile
import time
from functools import partial
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import torch
from measure import (
    add_bert_shape,
    add_device_options,
    bert_config,
    device_report,
    forward_flops,
    significant,
    start_device,
    timed_on,
    write_report,
)
from transformers import BertConfig, BertForSequenceClassification

from attnlab.data.dumps import SCHEMA, read_dump, within_tolerance, write_dump
from attnlab.data.tasks import TaskSpec, load_split
from attnlab.data.tokenization import build_tokenizer
from attnlab.engine import models
from attnlab.engine.attribution import Attribution, _softmax, attribute, fixed_rule
from attnlab.engine.batch_size import EncoderShape
from attnlab.engine.dump_rows import dump_rows, example_row
from attnlab.engine.intervention import Intervention
from attnlab.plumbing.device import set_precision

ENGINE_DEFAULTS = inspect.signature(attribute).parameters
# the adaptive rule with coarser scans than its default: cheaper where F is smooth, blind to
# narrower dips (docs/methods.md)
COARSER_SCANS = (4, 2)
DUMP_CFG = {"top_pairs": 3, "keep_full": False, "edge_min_fraction": 0.1,
            "max_edges_per_layer": 256}


def naive_attribute(model, inputs: dict[str, torch.Tensor], steps: int) -> Attribution:
    """The official code's loop: per example, per layer, a whole forward of m scaled copies."""
    nodes, weights = fixed_rule("riemann_right", steps)
    results = []
    for b in range(len(inputs["labels"])):
        one = {k: v[b : b + 1] for k, v in inputs.items() if k != "labels"}
        target = inputs["labels"][b : b + 1]
        capture = Intervention(capture=True)
        with torch.no_grad():
            probs = _softmax(models.logits(model, one, capture))
        attention = torch.stack([capture.probs[i] for i in sorted(capture.probs)], dim=1)
        attr = torch.zeros_like(attention)
        f_zero = torch.zeros(1, attention.shape[1], device=attention.device)
        copies = {k: v.expand(steps, -1) for k, v in one.items()}
        for layer in range(attention.shape[1]):
            intervention = Intervention(scale_layer=layer, scale=nodes.float())
            f = _softmax(models.logits(model, copies, intervention))[:, target[0]]
            (grad,) = torch.autograd.grad(f.sum(), intervention.scaled)
            attr[0, layer] = attention[0, layer] * (
                grad * weights.to(grad).view(-1, 1, 1, 1)).sum(0)
            with torch.no_grad():
                zero = Intervention(scale_layer=layer, scale=torch.zeros(1))
                f_zero[0, layer] = _softmax(models.logits(model, one, zero))[0, target[0]]
        f_full = probs[:, target[0]]
        residual = attr.double().sum(dim=(2, 3, 4)) - (f_full[:, None] - f_zero).double()
        results.append(Attribution(attr, attention, probs, target, f_full, f_zero,
                                   torch.full_like(f_zero, steps, dtype=torch.long), residual))
    return Attribution(*(torch.cat([getattr(r, f) for r in results]) for f in
                         ("attr", "attention", "probs", "target", "f_full", "f_zero", "nodes",
                          "residual")))


def dump_bytes_per_example(result: Attribution) -> float:
    rows = [example_row(result, b, DUMP_CFG) for b in range(len(result.target))]
    for row in rows:
        row.update(idx=0, label=0, tokens=["tok"] * row["n_tokens"],
                   segments=[0] * row["n_tokens"], planted_i=None, planted_j=None)
    buffer = io.BytesIO()
    pq.write_table(__import__("pyarrow").Table.from_pylist(rows, schema=SCHEMA), buffer,
                   compression="zstd")
    return buffer.tell() / len(rows)


def engine_flops(shape: EncoderShape, tokens: int, grad_nodes: list[int], forward_rows: int
                 ) -> float:
    """FLOPs of one example's attribution by the engine: one whole forward pass, and at each
    layer l `forward_rows` forward-only rows (F(0·A^l), the adaptive rule's scan) and
    grad_nodes[l] rows with a backward pass, through layers l..L-1 (the engine starts them
    from the cached hidden state). A backward pass is counted as one more forward: autograd
    computes the activations' gradients only, not the weights'."""
    n_layers = len(grad_nodes)
    total = forward_flops(shape, tokens)
    for layer, nodes in enumerate(grad_nodes):
        total += (forward_rows + 2 * nodes) * forward_flops(shape, tokens, n_layers - layer)
    return total


def naive_flops(shape: EncoderShape, tokens: int, steps: int) -> float:
    """FLOPs of one example's naive attribution: per layer `steps` whole forward and backward
    passes and one forward for F(0·A^l), and one forward capturing the attention."""
    return (shape.layers * (2 * steps + 1) + 1) * forward_flops(shape, tokens)


def write_model_and_dev(model, folder: Path, n_examples: int, tokens: int, seed: int
                        ) -> tuple[Path, Path, TaskSpec]:
    """The model with a word-level tokenizer, and a dev split of `n_examples` random sentences
    of exactly `tokens` tokens ([CLS] and [SEP] included), as an attribute job reads them."""
    words = [f"w{k}" for k in range(1000)]
    tokenizer = build_tokenizer(words)
    model.save_pretrained(folder / "model")
    tokenizer.save_pretrained(folder / "model")
    rng = np.random.default_rng(seed)
    dev = pd.DataFrame({
        "idx": np.arange(n_examples),
        "sentence": [" ".join(rng.choice(words, tokens - 2)) for _ in range(n_examples)],
        "label": np.arange(n_examples) % model.config.num_labels,
    })
    dev.to_parquet(folder / "dev.parquet")
    spec = TaskSpec("bench", ("sentence",), tuple(f"c{k}" for k in range(model.config.num_labels)))
    return folder / "model", folder / "dev.parquet", spec


def shard_attribution(args: argparse.Namespace) -> dict:
    """The attribution settings of the end-to-end run: the schema's defaults but the rule and
    the batch size asked for."""
    engine = {name: p.default for name, p in ENGINE_DEFAULTS.items()}
    batch = args.batch_size if args.batch_size == "auto" else int(args.batch_size)
    return {**DUMP_CFG, "quadrature": args.shard_rule, "steps": args.shard_steps,
            "tolerance": engine["tolerance"], "max_steps": engine["max_steps"],
            "scan_steps": engine["scan_steps"], "score": engine["score"], "batch_size": batch,
            "target": "gold"}


def attribute_end_to_end(model_dir: Path, dev_path: Path, spec: TaskSpec, attribution: dict,
                         model_cfg: dict, device: torch.device, out_path: Path,
                         bf16: bool = False) -> int:
    """What an attribute job does with its shard (attnlab.stages.attribute): read the model
    and the examples, attribute them into dump rows, write the dump; returns the rows per
    pass it took."""
    model, tokenizer = models.load_classifier(model_dir, device)
    attributed = dump_rows(model, tokenizer, load_split(dev_path, spec), spec, attribution,
                           model_cfg, bf16=bf16)
    write_dump(attributed.rows, out_path,
               {"n_layers": attributed.n_layers, "n_heads": attributed.n_heads})
    return attributed.batch_size


def end_to_end(model, config: BertConfig, args: argparse.Namespace, device: torch.device,
               precision: str) -> dict:
    """Attribute --shard-examples examples end to end, timed, with its dump's
    FLOPs and the peak memory; against fp32 on the same examples when precision is not fp32."""
    attribution = shard_attribution(args)
    shape = EncoderShape.of(config)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        model_dir, dev_path, spec = write_model_and_dev(model.cpu(), folder, args.shard_examples,
                                                        args.tokens, seed=1)
        model_cfg = {"max_length": args.tokens, "truncate": False}
        batch_size, seconds, memory = timed_on(device, lambda: attribute_end_to_end(
            model_dir, dev_path, spec, attribution, model_cfg, device, folder / "dump.parquet",
            bf16=precision == "bf16"))
        dump, _ = read_dump(folder / "dump.parquet")
        adaptive = attribution["quadrature"] == "adaptive"
        forward_rows = 1 + (attribution["scan_steps"] - 1 if adaptive else 0)
        flops = sum(engine_flops(shape, int(row.n_tokens), list(row.grad_nodes), forward_rows)
                    for row in dump.itertuples())
        report = {
            "rule": "adaptive" if adaptive
            else f"{attribution['quadrature']}_{attribution['steps']}",
            "tolerance": attribution["tolerance"], "examples": len(dump),
            "seconds": round(seconds, 2),
            "examples_per_s": round(len(dump) / seconds, 2),
            "batch_size": batch_size, "memory": memory,
            "grad_nodes_mean": float(np.stack(dump["grad_nodes"]).mean()),
            "within_tolerance": float(within_tolerance(np.abs(np.stack(dump["residual"])),
                                                       attribution["tolerance"]).mean()),
            **device_report(device, precision, flops, seconds),
        }
        if precision != "fp32":
            set_precision("fp32", device)
            attribute_end_to_end(model_dir, dev_path, spec, attribution, model_cfg, device,
                                 folder / "fp32.parquet")
            set_precision(args.precision, device)
            exact, _ = read_dump(folder / "fp32.parquet")
            maxima = [np.stack(d["attr_max"]) for d in (dump, exact)]
            report["accuracy_vs_fp32"] = {
                "head_max_change_max": float(np.abs(maxima[0] - maxima[1]).max()
                                             / np.abs(maxima[1]).max()),
                "f_full_change_max": float(np.abs(dump["f_full"] - exact["f_full"]).max()),
                "residual_abs_max": float(np.abs(np.stack(dump["residual"])).max()),
                "residual_abs_max_fp32": float(np.abs(np.stack(exact["residual"])).max()),
                "grad_nodes_mean_fp32": float(np.stack(exact["grad_nodes"]).mean()),
            }
    report["gpu_target"] = {"examples_per_s": 100, "met": report["examples_per_s"] >= 100}
    return report


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_bert_shape(parser)
    parser.add_argument("--examples", type=int, default=2,
                        help="examples of the per-example comparison with the naive loop")
    # BERT's own initialisation (std 0.02): F(αA) is smooth, and every rule but Riemann's is
    # exact to float32 rounding there. With 0.05 F is no longer smooth (docs/benchmarks.md).
    parser.add_argument("--init", type=float, default=BertConfig().initializer_range)
    parser.add_argument("--shard-examples", type=int, default=0,
                        help="examples attributed end to end as an attribute job does (0: none)")
    parser.add_argument("--shard-rule", default="adaptive",
                        choices=("adaptive", "riemann_right", "riemann_left", "gauss_legendre"))
    parser.add_argument("--shard-steps", type=int, default=20, help="nodes of a fixed rule")
    parser.add_argument("--batch-size", default="auto", help="rows per pass: auto or a number")
    add_device_options(parser)
    return parser.parse_args()


def variants_of(model) -> tuple[dict, dict[str, int]]:
    """The variants compared per example, each a function of a one-example batch, and the
    forward-only rows per layer each runs besides its gradient nodes (F(0·A^l), the scan)."""
    engine_default = f"engine_{ENGINE_DEFAULTS['quadrature'].default}"
    variants = {
        "naive_riemann_right_20": lambda one: naive_attribute(model, one, 20),
        "engine_riemann_right_20": lambda one: attribute(model, one, "gold", "riemann_right", 20),
        "engine_gauss_legendre_6": lambda one: attribute(model, one, "gold", "gauss_legendre", 6),
        engine_default: lambda one: attribute(model, one),
        **{f"{engine_default}_scan_{scan}": partial(attribute, model, scan_steps=scan)
           for scan in COARSER_SCANS},
    }
    scan_rows = {engine_default: ENGINE_DEFAULTS["scan_steps"].default - 1,
                 **{f"{engine_default}_scan_{scan}": scan - 1 for scan in COARSER_SCANS}}
    return variants, scan_rows


def compare_variants(variants: dict, scan_rows: dict[str, int], inputs: dict[str, torch.Tensor],
                     shape: EncoderShape, args: argparse.Namespace, device: torch.device,
                     autocast) -> tuple[dict, Attribution, float, float]:
    """Every variant on every example, one example per round, every variant on it in a
    rotated order, so that load from other jobs on a shared machine falls on every variant
    alike: each variant's report, the last attribution, and the FLOPs and seconds of all."""
    seconds = dict.fromkeys(variants, 0.0)
    flops = dict.fromkeys(variants, 0.0)
    errors: dict[str, list[torch.Tensor]] = {name: [] for name in variants}
    nodes: dict[str, list[torch.Tensor]] = {name: [] for name in variants}
    names = list(variants)
    for b in range(args.examples):
        one = {k: v[b : b + 1] for k, v in inputs.items()}
        for name in names[b % len(names):] + names[: b % len(names)]:
            start = time.perf_counter()
            with autocast:
                result = variants[name](one)
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            seconds[name] += time.perf_counter() - start
            errors[name].append(result.completeness_error().cpu())
            nodes[name].append(result.nodes.float().mean().cpu())
            flops[name] += (naive_flops(shape, args.tokens, 20) if name.startswith("naive")
                            else engine_flops(shape, args.tokens, result.nodes[0].tolist(),
                                              1 + scan_rows.get(name, 0)))
    reports = {}
    for name in variants:
        error = torch.cat(errors[name])
        reports[name] = {
            "seconds_per_example": round(seconds[name] / args.examples, 3),
            "examples_per_s": round(args.examples / seconds[name], 2),
            "completeness_error_median": float(error.median()),
            "completeness_error_max": float(error.max()),
            "grad_nodes_mean": float(torch.stack(nodes[name]).mean()),
            "achieved_tflops": significant(flops[name] / seconds[name] / 1e12),
        }
    return reports, result, sum(flops.values()), sum(seconds.values())


def against_naive(reports: dict) -> dict:
    """Each variant's speed-up over the naive loop, added to its report, and the target: the
    engine's default rule >= 6x faster than naive at a smaller median error."""
    naive = reports["naive_riemann_right_20"]
    for entry in reports.values():
        entry["speedup_vs_naive"] = round(naive["seconds_per_example"]
                                          / entry["seconds_per_example"], 2)
    engine_default = f"engine_{ENGINE_DEFAULTS['quadrature'].default}"
    default = reports[engine_default]
    smaller = default["completeness_error_median"] < naive["completeness_error_median"]
    return {"variant": engine_default, "speedup_vs_naive": default["speedup_vs_naive"],
            "smaller_median_error": smaller,
            "met": default["speedup_vs_naive"] >= 6 and smaller}


def main() -> None:
    args = arguments()
    device, precision = start_device(args)
    autocast = (torch.autocast(device.type, dtype=torch.bfloat16) if precision == "bf16"
                else contextlib.nullcontext())
    torch.manual_seed(0)
    config = bert_config(args, initializer_range=args.init)
    model = models.prepare_model(BertForSequenceClassification(config)).to(device)
    inputs = {
        "input_ids": torch.randint(1000, config.vocab_size, (args.examples, args.tokens)),
        "attention_mask": torch.ones(args.examples, args.tokens, dtype=torch.long),
        "labels": torch.arange(args.examples) % 3,
    }
    inputs = {k: v.to(device) for k, v in inputs.items()}
    reports, result, flops, seconds = compare_variants(
        *variants_of(model), inputs, EncoderShape.of(config), args, device, autocast)
    report = {"shape": vars(args), "variants": reports, "target": against_naive(reports),
              "dump_bytes_per_example": round(dump_bytes_per_example(result)),
              "device": device_report(device, precision, flops, seconds)["device"]}
    if args.shard_examples:
        report["end_to_end"] = end_to_end(model, config, args, device, precision)
    write_report(report, args.out)


if __name__ == "__main__":
    main()
