"""Fine-tuning speed of a BERT-shaped classifier through attnlab's own training loop.

One epoch of `training._train` (AdamW, fused; warm-up and decay; gradient clipping; bf16
autocast with --precision bf16 where the device has it) over --train-examples random
examples, once with random batches padded to the longest example (the papers' way) and once
with `finetune.length_buckets` (batches of similar length, each padded to its longest).
Lengths are drawn uniformly from [--min-tokens, --tokens]; by default all are --tokens long,
the paper's padded shape, where buckets change nothing. Reports examples/s, peak memory,
achieved TFLOP/s (a training step counted as 3 forward passes at each batch's padded width)
with its share of the device's peak, and the time 3 epochs of MNLI's 392,702 training
examples would take at that rate and these lengths.
Usage: python benchmarks/finetune.py [--device cuda] [--precision bf16] [--min-tokens 16]
       [--out benchmarks/results/finetune-h100.json] ...
"""

from __future__ import annotations

import argparse
from functools import partial

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
from transformers import BertForSequenceClassification

from attnlab.data.tasks import TaskSpec
from attnlab.engine.batch_size import EncoderShape
from attnlab.engine.training import _classifier_loss, _train, accuracy, length_bucket_order

MNLI_TRAIN = 392_702
SEED = 0


def random_split(n: int, min_tokens: int, tokens: int, vocab: int, generator: torch.Generator
                 ) -> dict[str, torch.Tensor]:
    """`n` right-padded examples of random ids, lengths uniform in [min_tokens, tokens]."""
    lengths = torch.randint(min_tokens, tokens + 1, (n,), generator=generator)
    mask = (torch.arange(tokens) < lengths[:, None]).long()
    ids = torch.randint(1000, vocab, (n, tokens), generator=generator) * mask
    return {"input_ids": ids, "attention_mask": mask,
            "token_type_ids": torch.zeros_like(ids),
            "labels": torch.randint(0, 3, (n,), generator=generator)}


def padded_widths(train: dict[str, torch.Tensor], batch_size: int, buckets: bool) -> list[int]:
    """The padded width of every batch of the first epoch, as `_train` draws it (same seed)."""
    lengths = train["attention_mask"].sum(dim=1)
    if not buckets:
        return [train["input_ids"].shape[1]] * -(-len(lengths) // batch_size)
    order = length_bucket_order(lengths, batch_size, torch.Generator().manual_seed(SEED))
    return [int(lengths[rows].max()) for rows in order.split(batch_size)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_bert_shape(parser)
    parser.add_argument("--min-tokens", type=int, help="shortest example (default: --tokens)")
    parser.add_argument("--train-examples", type=int, default=4096)
    parser.add_argument("--batch-size", type=int, default=32)
    add_device_options(parser)
    args = parser.parse_args()
    device, precision = start_device(args)
    config = bert_config(args, attn_implementation="eager")
    data = torch.Generator().manual_seed(SEED)
    train = random_split(args.train_examples, args.min_tokens or args.tokens, args.tokens,
                         config.vocab_size, data)
    dev = random_split(args.batch_size, args.tokens, args.tokens, config.vocab_size, data)
    spec = TaskSpec("bench", ("sentence",), ("a", "b", "c"))
    train_cfg = {"epochs": 1, "batch_size": args.batch_size, "learning_rate": 2e-5,
                 "warmup": 0.1, "weight_decay": 0.01}
    evaluate = partial(accuracy, data=dev, batch_size=args.batch_size, device=device)
    train_loop = partial(_train, loss_of=_classifier_loss, evaluate=evaluate, name=spec.name,
                         device=device, seed=SEED, bf16=precision == "bf16")
    # a few untimed steps first, so that neither variant pays for CUDA's and the allocator's
    # start-up
    warm = {key: value[: 2 * args.batch_size] for key, value in train.items()}
    train_loop(BertForSequenceClassification(config).to(device), warm, train_cfg=train_cfg)
    report = {"shape": vars(args), "variants": {
        name: timed_epoch(train_loop, config, train, device, precision, args, train_cfg={
            **train_cfg, "length_buckets": buckets})
        for name, buckets in (("random_batches", False), ("length_buckets", True))}}
    write_report(report, args.out)


def timed_epoch(train_loop, config, train: dict[str, torch.Tensor], device: torch.device,
                precision: str, args: argparse.Namespace, train_cfg: dict) -> dict:
    """One epoch of a fresh model (seed SEED) by `train_loop` with `train_cfg`, timed: its
    rate, padding, peak memory and FLOPs."""
    torch.manual_seed(SEED)
    model = BertForSequenceClassification(config).to(device)
    _, seconds, memory = timed_on(device, lambda: train_loop(model, train, train_cfg=train_cfg))
    widths = padded_widths(train, args.batch_size, train_cfg["length_buckets"])
    sizes = [len(rows) for rows in torch.arange(args.train_examples).split(args.batch_size)]
    # forward, and a backward of about twice its cost (activations' and weights' gradients)
    flops = sum(3 * rows * forward_flops(EncoderShape.of(config), width)
                for rows, width in zip(sizes, widths, strict=True))
    rate = args.train_examples / seconds
    return {
        "examples_per_s": significant(rate),
        "seconds": round(seconds, 2),
        "mean_padded_width": significant(sum(widths) / len(widths)),
        "memory": memory,
        "mnli_3_epochs_hours": significant(3 * MNLI_TRAIN / rate / 3600),
        **device_report(device, precision, flops, seconds),
    }


if __name__ == "__main__":
    main()
