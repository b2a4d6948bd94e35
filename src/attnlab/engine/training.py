"""Fine-tuning a sequence classifier on a task: a plain, seeded PyTorch loop.

The default builds a tiny BERT from scratch whose word-level vocabulary is the words of the
training split (fully offline, a minute or two on CPU); `model.source: pretrained` fine-tunes
a pretrained checkpoint, and `model.source: finetuned` takes a checkpoint already fine-tuned
for the task as published (evaluated, not trained). The functions take the splits and config
sections as plain values and return the model, its tokenizer and the run's metrics
(`Trained`); the workflow's stages read and write the files.
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any, NamedTuple

import pandas as pd
import torch
from tqdm import tqdm
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    AutoModelForMaskedLM,
    AutoModelForSequenceClassification,
    AutoTokenizer,
    PretrainedConfig,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)

from attnlab.data.prompts import PromptSpec
from attnlab.data.tasks import TaskSpec, split_texts
from attnlab.data.tokenization import (
    build_tokenizer,
    causal_tokenizer,
    length_limit,
    model_tokenizer,
    training_words,
)
from attnlab.engine import examples, next_token
from attnlab.engine.examples import encode
from attnlab.engine.models import align_labels, from_pretrained
from attnlab.engine.next_token import encode_prompts
from attnlab.plumbing.device import device_name, out_of_memory_names
from attnlab.plumbing.errors import ConfigError
from attnlab.plumbing.families import CLASSIFIER, DECODER, FAMILIES, SCRATCH_DEFAULT, names
from attnlab.plumbing.outputs import atomic_path
from attnlab.plumbing.preflight import checkpoint_shape

log = logging.getLogger(__name__)

MAX_GRAD_NORM = 1.0  # gradient clipping, as in the transformers Trainer
# finetune.length_buckets: batches of similar length come from windows of this many batches
# of a random permutation (as the transformers Trainer's group_by_length)
BUCKET_BATCHES = 50
# the metrics of a model evaluated without a training step: one of source `finetuned`, as
# published, or the untrained control's starting model
UNTRAINED = {"train_loss": None, "epochs": 0, "steps": 0, "n_train": 0}


class Trained(NamedTuple):
    """A trained model, its tokenizer and the metrics of the run."""

    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    metrics: dict[str, Any]

    def save(self, out_dir: str | os.PathLike) -> None:
        """Model and tokenizer into the folder `out_dir`, as save_pretrained writes them (the
        folder appears only once complete)."""
        with atomic_path(out_dir) as tmp:
            self.model.save_pretrained(tmp)
            self.tokenizer.save_pretrained(tmp)


def scratch_config(
    model_cfg: dict[str, Any], tokenizer: PreTrainedTokenizerBase, kind: str, **labels: Any
) -> PretrainedConfig:
    """The model of model.scratch's family (absent: bert) and sizes over `tokenizer`'s
    vocabulary, under the config.json keys of its row in attnlab.plumbing.families; refused in
    one line unless it is a family of `kind` that can be built from scratch."""
    size = model_cfg["scratch"]
    name = size.get("family", SCRATCH_DEFAULT)
    fitting = names(kind, scratch=True)
    if name not in fitting:
        raise ConfigError(f"model.scratch.family: {name!r} is not a {kind} family built from "
                          f"scratch ({', '.join(fitting)})")
    family = FAMILIES[name]
    keys = family.sizes
    special = {"pad_token_id": tokenizer.pad_token_id}
    if family.causal:  # the word-level vocabulary's one boundary token begins and ends
        special |= {"bos_token_id": tokenizer.bos_token_id,
                    "eos_token_id": tokenizer.bos_token_id}
    return AutoConfig.for_model(
        name,
        vocab_size=len(tokenizer),
        **{keys.hidden: size["hidden"], keys.layers: size["layers"], keys.heads: size["heads"],
           keys.intermediate: size["intermediate"], keys.positions: length_limit(model_cfg)[0]},
        **dict.fromkeys(family.scratch_dropout, size.get("dropout", 0.1)),
        attn_implementation="eager",
        **special,
        **labels,
    )


def _build_model(
    spec: TaskSpec, model_cfg: dict[str, Any], train: pd.DataFrame, start: str | None = None
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    labels = {
        "num_labels": len(spec.label_names),
        "id2label": dict(enumerate(spec.label_names)),
        "label2id": {name: i for i, name in enumerate(spec.label_names)},
    }
    source = model_cfg["source"]
    if source == "scratch" and start is not None:
        # the shared starting point of every task (pretrain): its vocabulary and weights
        model = AutoModelForSequenceClassification.from_pretrained(
            start, attn_implementation="eager", **labels)
        return model, AutoTokenizer.from_pretrained(start)
    if source == "scratch":
        tokenizer = model_tokenizer(spec, model_cfg, train)
        config = scratch_config(model_cfg, tokenizer, CLASSIFIER, **labels)
        return AutoModelForSequenceClassification.from_config(config), tokenizer
    name = model_cfg["pretrained"]
    checkpoint_shape(name)  # an unsupported family is refused before any training
    if source == "pretrained":
        model = AutoModelForSequenceClassification.from_pretrained(
            name, attn_implementation="eager", **labels
        )
    elif source == "finetuned":
        # used as published: its own classifier, with its classes in the task's order
        model = align_labels(
            AutoModelForSequenceClassification.from_pretrained(name, attn_implementation="eager"),
            spec.label_names,
        )
    else:
        raise ConfigError(f"model.source: {source!r} is not scratch, pretrained or finetuned")
    return model, model_tokenizer(spec, model_cfg, train)


def _batches(data: dict[str, torch.Tensor], order: torch.Tensor, size: int, device: torch.device):
    for start in range(0, len(order), size):
        rows = order[start : start + size]
        yield {key: value[rows].to(device) for key, value in data.items()}


def _trimmed(batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The batch padded to its own longest example (the split is padded to its longest): the
    cut positions are padding of every row, which attention masks out."""
    width = int(batch["attention_mask"].sum(dim=1).max())
    return {key: value[:, :width] if value.dim() == 2 else value for key, value in batch.items()}


def length_bucket_order(
    lengths: torch.Tensor, batch_size: int, generator: torch.Generator
) -> torch.Tensor:
    """An epoch's order of examples whose consecutive `batch_size` rows have similar lengths.

    A random permutation is cut into windows of BUCKET_BATCHES batches, each window sorted by
    length and cut into batches, and the batches of all windows shuffled: every batch is still
    a random draw of its window, and a long one is not always followed by another.
    """
    order = torch.randperm(len(lengths), generator=generator)
    window = BUCKET_BATCHES * batch_size
    batches = []
    for start in range(0, len(order), window):
        rows = order[start : start + window]
        rows = rows[torch.argsort(lengths[rows], stable=True)]
        batches += list(rows.split(batch_size))
    # the epoch's last, short batch stays last, as in the order without buckets
    last = [batches.pop()] if batches and len(batches[-1]) < batch_size else []
    shuffled = [batches[i] for i in torch.randperm(len(batches), generator=generator)]
    return torch.cat(shuffled + last)


@torch.no_grad()
def accuracy(
    model: PreTrainedModel, data: dict[str, torch.Tensor], batch_size: int, device: torch.device
) -> float:
    """Fraction of examples whose argmax prediction equals the label."""
    model.eval()
    correct = 0
    order = torch.arange(len(data["labels"]))
    for batch in _batches(data, order, batch_size, device):
        labels = batch.pop("labels")
        correct += int((model(**batch).logits.argmax(dim=-1) == labels).sum())
    return correct / len(order)


def _linear_schedule(warmup_steps: int, total_steps: int):
    """Learning-rate factor: linear warmup to 1, then linear decay to 0 at the last step."""

    def factor(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / warmup_steps
        return max(0.0, (total_steps - step) / max(1, total_steps - warmup_steps))

    return factor


def _classifier_loss(model: PreTrainedModel, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """The classifier's own cross-entropy of the batch's labels."""
    return model(**batch).loss


def _optimizer(model: PreTrainedModel, train_cfg: dict[str, Any], total_steps: int):
    """AdamW with BERT's weight decay groups and a linear warm-up and decay over `total_steps`:
    (optimizer, scheduler)."""
    # no weight decay on biases and LayerNorm weights, as in BERT
    decay = [p for p in model.parameters() if p.ndim >= 2]
    no_decay = [p for p in model.parameters() if p.ndim < 2]
    optimizer = torch.optim.AdamW(
        [
            {"params": decay, "weight_decay": train_cfg["weight_decay"]},
            {"params": no_decay, "weight_decay": 0.0},
        ],
        lr=train_cfg["learning_rate"],
        fused=True,  # one kernel for all parameters: a quarter faster for the tiny default model
    )
    warmup_steps = max(1, round(train_cfg["warmup"] * total_steps))
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, _linear_schedule(warmup_steps, total_steps)
    )
    return optimizer, scheduler


def _epoch(
    model: PreTrainedModel,
    batches: Iterator[dict[str, torch.Tensor]],
    *,
    loss_of: Callable[[PreTrainedModel, dict[str, torch.Tensor]], torch.Tensor],
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    bf16: bool,
    progress: tqdm,
) -> float:
    """One pass over `batches`, a step each: the summed training loss (per example)."""
    model.train()
    total = 0.0
    for batch in batches:
        device = batch["input_ids"].device
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            loss = loss_of(model, batch)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), MAX_GRAD_NORM)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
        total += loss.item() * len(batch["input_ids"])
        progress.update()
    return total


def _train(
    model: PreTrainedModel,
    train: dict[str, torch.Tensor],
    *,
    loss_of: Callable[[PreTrainedModel, dict[str, torch.Tensor]], torch.Tensor],
    evaluate: Callable[[PreTrainedModel], float] | None,
    name: str,
    train_cfg: dict[str, Any],
    device: torch.device,
    seed: int,
    bf16: bool,
) -> dict[str, Any]:
    """The training loop of classifiers and language models: AdamW, linear warm-up and decay,
    gradient clipping, minimising `loss_of(model, batch)` over the encoded examples `train`;
    `evaluate(model)`, the dev accuracy (None: no dev split), is logged after every epoch.
    With `bf16` the steps run under bfloat16 autocast (the weights and their updates stay
    float32). Training stops after the first epoch whose mean training loss is below
    train_cfg["stop_loss"] (when set); the schedule stays the one of all the epochs. With
    train_cfg["length_buckets"] the batches hold examples of similar length
    (`length_bucket_order`), each padded only to its longest example. `name` names the task in
    the log and the progress bar."""
    n_train = len(train["input_ids"])
    epochs, batch_size = train_cfg["epochs"], train_cfg["batch_size"]
    steps_per_epoch = math.ceil(n_train / batch_size)
    total_steps = epochs * steps_per_epoch
    optimizer, scheduler = _optimizer(model, train_cfg, total_steps)
    shuffle = torch.Generator().manual_seed(seed)
    stop_loss = train_cfg.get("stop_loss")
    buckets = train_cfg.get("length_buckets", False)
    lengths = train["attention_mask"].sum(dim=1)

    log.info("%s: training a %s on %d examples, %d epochs, %d steps, device %s",
             name, model.config.model_type, n_train, epochs, total_steps, device)
    progress = tqdm(total=total_steps, desc=f"finetune {name}", mininterval=5)
    for epoch in range(1, epochs + 1):
        if buckets:
            order = length_bucket_order(lengths, batch_size, shuffle)
        else:
            order = torch.randperm(n_train, generator=shuffle)
        batches = _batches(train, order, batch_size, device)
        train_loss = _epoch(model, map(_trimmed, batches) if buckets else batches,
                            loss_of=loss_of, optimizer=optimizer, scheduler=scheduler,
                            bf16=bf16, progress=progress) / n_train
        dev_accuracy = None if evaluate is None else evaluate(model)
        log.info("%s epoch %d/%d: train loss %.4f%s", name, epoch, epochs, train_loss,
                 "" if dev_accuracy is None else f", dev accuracy {dev_accuracy:.4f}")
        if stop_loss is not None and train_loss < stop_loss:
            log.info("%s: train loss below finetune.stop_loss=%g, stopping after epoch %d",
                     name, stop_loss, epoch)
            break
    progress.close()
    return {"dev_accuracy": dev_accuracy, "train_loss": train_loss, "epochs": epoch,
            "steps": epoch * steps_per_epoch, "n_train": n_train}


def _fit(
    build: Callable[[], tuple[PreTrainedModel, PreTrainedTokenizerBase]],
    train: pd.DataFrame,
    dev: pd.DataFrame,
    *,
    encode_split: Callable[[pd.DataFrame, PreTrainedTokenizerBase], dict[str, torch.Tensor]],
    accuracy_of: Callable[..., float],
    loss_of: Callable[[PreTrainedModel, dict[str, torch.Tensor]], torch.Tensor],
    classes: str,
    name: str,
    evaluate_only: bool,
    train_cfg: dict[str, Any],
    device: torch.device,
    seed: int,
    bf16: bool,
) -> Trained:
    """The model of `build()` trained on `train` by `_train` minimising `loss_of`, or with
    `evaluate_only` only evaluated, and its metrics: `accuracy_of` on `dev`, the chance level
    of the dev split's `classes` (the encoded key holding what is predicted).
    `encode_split(df, tokenizer)` encodes a split for the model."""
    started = time.monotonic()
    torch.manual_seed(seed)  # model initialisation and dropout
    model, tokenizer = build()
    model.to(device)
    dev_data = encode_split(dev, tokenizer)
    evaluate = partial(accuracy_of, data=dev_data, batch_size=train_cfg["batch_size"],
                       device=device)
    if evaluate_only:
        log.info("%s: the model is evaluated as it is, not trained", name)
        result = {"dev_accuracy": evaluate(model), **UNTRAINED}
    else:
        train_data = encode_split(train, tokenizer)
        with out_of_memory_names("finetune.batch_size", train_cfg["batch_size"],
                                 f"fine-tuning task {name} (up to "
                                 f"{train_data['input_ids'].shape[1]} tokens)"):
            result = _train(model, train_data, loss_of=loss_of, evaluate=evaluate, name=name,
                            train_cfg=train_cfg, device=device, seed=seed, bf16=bf16)
    return Trained(model, tokenizer, {
        **result,
        "n_dev": len(dev_data[classes]),
        "dev_chance": examples.chance(dev_data[classes]),
        "device": device_name(device),
        "seconds": round(time.monotonic() - started, 1),
    })


def finetune(
    train: pd.DataFrame,
    dev: pd.DataFrame,
    *,
    spec: TaskSpec,
    model_cfg: dict[str, Any],
    train_cfg: dict[str, Any],
    device: torch.device,
    seed: int,
    bf16: bool = False,
    start: str | os.PathLike | None = None,
    untrained: bool = False,
) -> Trained:
    """Train a classifier on the split `train` and evaluate it on `dev` (validated splits, as
    `attnlab.data.tasks.load_split` reads them).

    `model_cfg` and `train_cfg` are config["model"] (with model.pretrained a local directory)
    and config["finetune"]; a checkpoint of source `finetuned` is not trained, only evaluated
    (its classes put in the task's order). A scratch model starts from `start` (the shared
    checkpoint of `pretrain`) when given. `untrained`: the model as training would start
    from it, evaluated without a training step (the untrained control, config controls). The
    same config and seed give the same numbers on CPU. `bf16`: train under bfloat16 autocast.
    The metrics' seconds are those of building, training and evaluating the model.
    """
    max_length, truncate = length_limit(model_cfg)
    return _fit(
        partial(_build_model, spec, model_cfg, train, start), train, dev,
        encode_split=lambda df, tokenizer: encode(df, spec, tokenizer, max_length, truncate),
        accuracy_of=accuracy, loss_of=_classifier_loss, classes="labels", name=spec.name,
        evaluate_only=model_cfg["source"] == "finetuned" or untrained, train_cfg=train_cfg,
        device=device, seed=seed, bf16=bf16)


def _masked_lm_loss(model: PreTrainedModel, batch: dict[str, torch.Tensor], *, rate: float,
                    mask_id: int, special_ids: torch.Tensor,
                    generator: torch.Generator) -> torch.Tensor:
    """The masked-LM loss of the batch: each real token but the special ones replaced by [MASK]
    with probability `rate` (always [MASK], not BERT's 80/10/10: the vocabulary is tiny and the
    point is only a shared start) and predicted; the draws come from `generator`."""
    ids = batch["input_ids"]
    maskable = batch["attention_mask"].bool() & ~torch.isin(ids, special_ids.to(ids.device))
    chosen = (torch.rand(ids.shape, generator=generator) < rate).to(ids.device) & maskable
    return model(**{**batch, "input_ids": ids.masked_fill(chosen, mask_id),
                    "labels": ids.masked_fill(~chosen, -100)}).loss


def _pretraining_texts(frames: list[tuple[pd.DataFrame, TaskSpec]],
                       tokenizer: PreTrainedTokenizerBase) -> dict[str, torch.Tensor]:
    """Every task's training texts, encoded as its classifier sees them (segments, special
    tokens), padded to the longest."""
    texts: dict[str, list] = {"input_ids": [], "token_type_ids": []}
    for df, spec in frames:
        encoded = tokenizer(*split_texts(df, spec))
        for key, values in texts.items():
            values += encoded[key]
    return dict(tokenizer.pad(texts, return_tensors="pt"))


# The optimiser settings of pre-training that model.pretrain does not set: BERT's.
PRETRAIN_OPTIMISER = {"warmup": 0.1, "weight_decay": 0.01}


def pretrain(
    trains: list[pd.DataFrame],
    *,
    specs: list[TaskSpec],
    model_cfg: dict[str, Any],
    pretrain_cfg: dict[str, Any],
    device: torch.device,
    seed: int,
) -> Trained:
    """The shared starting point of every task (model.pretrain): one word-level vocabulary
    over all tasks' training words (`trains`, the training split of each task of `specs`) and
    one scratch BERT trained by masked-LM on all tasks' training text, by the training loop of
    the classifiers. Fine-tuned from it (finetune's `start`, once saved), head h of one task's
    model and head h of another's come from the same weights, as in the paper's tasks
    fine-tuned from one BERT, so their importances can be compared. The metrics' seconds are
    those of building and training."""
    started = time.monotonic()
    frames = list(zip(trains, specs, strict=True))
    words = sorted(set().union(*(training_words(df, spec) for df, spec in frames)))
    tokenizer = build_tokenizer(words)
    torch.manual_seed(seed)  # initialisation and dropout
    config = scratch_config(model_cfg, tokenizer, CLASSIFIER)
    model = AutoModelForMaskedLM.from_config(config).to(device)
    texts = _pretraining_texts(frames, tokenizer)
    log.info("pretrain: masked-LM on %d texts of %d tasks, vocabulary %d",
             len(texts["input_ids"]), len(frames), len(tokenizer))
    loss = partial(_masked_lm_loss, rate=pretrain_cfg["mask_rate"],
                   mask_id=tokenizer.mask_token_id,
                   special_ids=torch.tensor(tokenizer.all_special_ids),
                   generator=torch.Generator().manual_seed(seed))
    result = _train(model, texts, loss_of=loss, evaluate=None, name="pretrain",
                    train_cfg={**PRETRAIN_OPTIMISER, **pretrain_cfg}, device=device, seed=seed,
                    bf16=False)
    return Trained(model, tokenizer, {
        "mlm_loss": result["train_loss"], "epochs": result["epochs"], "texts": result["n_train"],
        "vocabulary": len(tokenizer), "device": device_name(device),
        "seconds": round(time.monotonic() - started, 1)})


def _causal_model(spec: PromptSpec, model_cfg: dict[str, Any], train: pd.DataFrame):
    if model_cfg["source"] == "scratch":
        tokenizer = causal_tokenizer(spec, model_cfg, train)
        config = scratch_config(model_cfg, tokenizer, DECODER)
        return AutoModelForCausalLM.from_config(config), tokenizer
    name, gguf_file = model_cfg["pretrained"], model_cfg.get("gguf_file")
    checkpoint_shape(name, gguf_file)  # an unsupported family is refused before any training
    model = from_pretrained(AutoModelForCausalLM, name, gguf_file, attn_implementation="eager")
    return model, causal_tokenizer(spec, model_cfg, train)


def _next_token_loss(model: PreTrainedModel, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """Cross-entropy of every next token from each example's `train_from` position to its
    query (the target), the model reading all tokens but the last of the batch cut to its
    longest example."""
    batch = _trimmed(batch)
    inputs, following = batch["input_ids"][:, :-1], batch["input_ids"][:, 1:]
    logits = model(input_ids=inputs, attention_mask=batch["attention_mask"][:, :-1]).logits
    index = torch.arange(inputs.shape[1], device=inputs.device)
    trained = ((index >= batch["train_from"][:, None])
               & (index <= batch["query"][:, None]))
    return torch.nn.functional.cross_entropy(logits[trained], following[trained])


def train_language_model(
    train: pd.DataFrame,
    dev: pd.DataFrame,
    *,
    spec: PromptSpec,
    model_cfg: dict[str, Any],
    train_cfg: dict[str, Any],
    device: torch.device,
    seed: int,
    bf16: bool = False,
    untrained: bool = False,
) -> Trained:
    """Train a decoder language model on a next-token task and evaluate it on `dev`.

    A scratch model (model.scratch.family a decoder family) gets a word-level vocabulary of the
    training split's words; a pretrained checkpoint is trained further, and one of source
    `finetuned` (or any with `untrained`, the untrained control) is only evaluated. The loss
    is the next-token cross-entropy from each example's `train_from` position to its target
    (`attnlab.engine.next_token.encode_prompts`), minimised by `finetune`'s training loop
    (`bf16`: under bfloat16 autocast). The metric is
    next-token accuracy at the query: dev_accuracy, the share of dev prompts whose argmax next
    token is the target. Prompts are never truncated (the config check refuses model.truncate
    for next-token tasks): one longer than model.max_length is an error."""
    max_length, _ = length_limit(model_cfg)
    return _fit(
        partial(_causal_model, spec, model_cfg, train), train, dev,
        encode_split=lambda df, tokenizer: encode_prompts(df, spec, tokenizer, max_length),
        accuracy_of=next_token.accuracy, loss_of=_next_token_loss, classes="target",
        name=spec.name, evaluate_only=model_cfg["source"] == "finetuned" or untrained,
        train_cfg=train_cfg, device=device, seed=seed, bf16=bf16)
