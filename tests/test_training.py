import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import out_of_memory_in
from safetensors.torch import load_file
from tiny_models import FAMILIES, tiny_batch, tiny_classifier, without_labels
from transformers import (
    AutoModelForSequenceClassification,
    AutoTokenizer,
    BertConfig,
    BertForSequenceClassification,
)

from attnlab.data import induction
from attnlab.data.prompts import PromptSpec
from attnlab.data.tasks import TaskSpec, load_split, prepare_task
from attnlab.data.tokenization import build_tokenizer, training_words
from attnlab.engine import training
from attnlab.engine.examples import encode
from attnlab.engine.models import align_labels
from attnlab.engine.training import _trimmed, accuracy, finetune, length_bucket_order
from attnlab.model_job import ModelJob
from attnlab.plumbing.errors import ConfigError
from attnlab.plumbing.families import CLASSIFIER
from attnlab.stages import finetune as finetune_stage
from attnlab.stages import pretrain as pretrain_stage

TINY_MODEL = {
    "source": "scratch",
    "scratch": {"layers": 1, "heads": 2, "hidden": 16, "intermediate": 32},
    "max_length": 64,
}
SHORT_TRAINING = {
    "epochs": 2, "batch_size": 16, "learning_rate": 1e-3, "warmup": 0.1, "weight_decay": 0.01,
}
CPU = torch.device("cpu")
ON_CPU = {"device": "cpu", "precision": "fp32"}


def columns(spec: TaskSpec) -> dict:
    """A task's columns and class names, as the rules finetune and pretrain get them."""
    return {"text_fields": list(spec.text_fields), "label_names": list(spec.label_names),
            "label_field": spec.label_field}


def run_finetune(spec: TaskSpec, train: Path, dev: Path, out: Path, *, model: dict = TINY_MODEL,
                 training: dict = SHORT_TRAINING, seed: int = 0, pretrained: Path | None = None,
                 start: Path | None = None, control: str | None = None) -> dict:
    """Rule finetune's stage on a prepared task (of the run, or of the control run `control`):
    the model into `out`, its metrics into `out`.json, which it returns."""
    metrics = out.parent / f"{out.name}.json"
    finetune_stage.run(ModelJob(
        rule="finetune",
        # as Snakemake names them: an input the rule has not is an empty list
        inputs={"train": str(train), "dev": str(dev),
                "pretrained": str(pretrained) if pretrained else [],
                "start": str(start) if start else []},
        outputs={"model": str(out), "metrics": str(metrics)},
        settings={"task": columns(spec), "model": model, "finetune": training, "seed": seed,
                  "control": control, **ON_CPU},
        wildcards={"task": spec.name},
    ))
    return json.loads(metrics.read_text())


@pytest.fixture
def small_task(tmp_path, pair_task):
    """A prepared small pair task: (spec, train path, dev path)."""
    pair_task["synthetic"].update(n_train=96, n_dev=32)
    train, dev = tmp_path / "train.parquet", tmp_path / "dev.parquet"
    prepare_task("syn_mnli", pair_task, 0, train, dev)
    return TaskSpec.from_config("syn_mnli", pair_task), train, dev


def test_build_tokenizer_is_word_level():
    tokenizer = build_tokenizer(["ka3", "Zu9"])
    encoded = tokenizer("ka3 zu9 nope", "zu9")
    tokens = tokenizer.convert_ids_to_tokens(encoded["input_ids"])
    assert tokens == ["[CLS]", "ka3", "zu9", "[UNK]", "[SEP]", "zu9", "[SEP]"]
    assert encoded["token_type_ids"] == [0, 0, 0, 0, 0, 1, 1]
    assert tokenizer.pad_token_id == 0


def test_training_words_follow_the_tokenizer(small_task):
    spec, train, _ = small_task
    frame = load_split(train, spec)
    tokenizer = build_tokenizer(training_words(frame, spec))
    assert (encode(frame, spec, tokenizer, 64)["input_ids"] != tokenizer.unk_token_id).all()
    assert training_words(frame.assign(premise="Hello, world!"), spec)[:4] == [
        "!", ",", "hello", "mb0"]


def test_short_run_is_reproducible_and_reloads(tmp_path, small_task):
    spec, train, dev = small_task
    runs = [run_finetune(spec, train, dev, tmp_path / f"model{i}", seed=3) for i in range(2)]
    for key in ("dev_accuracy", "train_loss", "steps", "n_train", "n_dev"):
        assert runs[0][key] == runs[1][key]
    assert runs[0]["steps"] == 2 * 6 and runs[0]["n_dev"] == 32
    weights = [load_file(tmp_path / f"model{i}" / "model.safetensors") for i in range(2)]
    assert weights[0].keys() == weights[1].keys()
    assert all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])
    assert not list(tmp_path.glob(".*partial*"))

    model = AutoModelForSequenceClassification.from_pretrained(
        tmp_path / "model0", local_files_only=True)
    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "model0", local_files_only=True)
    assert model.config.id2label == dict(enumerate(spec.label_names))
    data = encode(load_split(dev, spec), spec, tokenizer, TINY_MODEL["max_length"])
    assert accuracy(model, data, 16, CPU) == runs[0]["dev_accuracy"]


@pytest.mark.parametrize("stop_loss, epochs", [(None, 2), (1e-9, 2), (100.0, 1)])
def test_training_stops_after_the_first_epoch_below_stop_loss(tmp_path, small_task, stop_loss,
                                                              epochs):
    spec, train, dev = small_task
    metrics = run_finetune(spec, train, dev, tmp_path / "model",
                           training={**SHORT_TRAINING, "stop_loss": stop_loss})
    # 96 examples in batches of 16: 6 steps per epoch
    assert (metrics["epochs"], metrics["steps"]) == (epochs, 6 * epochs)


def test_another_seed_gives_other_weights(tmp_path, small_task):
    spec, train, dev = small_task
    for seed in (0, 1):
        run_finetune(spec, train, dev, tmp_path / f"seed{seed}",
                     training={**SHORT_TRAINING, "epochs": 1}, seed=seed)
    first, second = (load_file(tmp_path / f"seed{s}" / "model.safetensors") for s in (0, 1))
    assert not all(torch.equal(first[k], second[k]) for k in first)


def test_the_untrained_control_is_the_model_training_starts_from(tmp_path, small_task):
    """No training step: the saved model is the seed's initialisation, which a training run of
    the same seed starts from and moves away from."""
    spec, train, dev = small_task
    metrics = run_finetune(spec, train, dev, tmp_path / "untrained", control="untrained")
    assert (metrics["epochs"], metrics["steps"], metrics["train_loss"]) == (0, 0, None)
    torch.manual_seed(0)
    tokenizer = training.model_tokenizer(spec, TINY_MODEL, load_split(train, spec))
    start = AutoModelForSequenceClassification.from_config(training.scratch_config(
        TINY_MODEL, tokenizer, CLASSIFIER, num_labels=len(spec.label_names)))
    saved = load_file(tmp_path / "untrained" / "model.safetensors")
    assert all(torch.equal(saved[k], v) for k, v in start.state_dict().items() if k in saved)
    run_finetune(spec, train, dev, tmp_path / "trained")
    trained = load_file(tmp_path / "trained" / "model.safetensors")
    assert not all(torch.equal(saved[k], trained[k]) for k in saved)


def test_bf16_trains_under_autocast_and_keeps_float32_weights(tmp_path, small_task):
    # CPU autocast runs the same bfloat16 path a GPU takes with precision: bf16
    spec, train, dev = small_task
    short = {**SHORT_TRAINING, "epochs": 1}
    splits = load_split(train, spec), load_split(dev, spec)
    for bf16 in (False, True):
        finetune(*splits, spec=spec, model_cfg=TINY_MODEL, train_cfg=short, device=CPU, seed=0,
                 bf16=bf16).save(tmp_path / f"bf16={bf16}")
    fp32, bf16 = (load_file(tmp_path / f"bf16={b}" / "model.safetensors") for b in (False, True))
    assert all(weight.dtype == torch.float32 for weight in bf16.values())
    assert not all(torch.equal(fp32[k], bf16[k]) for k in fp32)  # bfloat16 rounding took effect


@pytest.mark.parametrize("family", FAMILIES)
def test_a_published_classifier_takes_the_task_order_of_classes(family):
    model = tiny_classifier(family)
    model.config.id2label = {0: "contradiction", 1: "neutral", 2: "entailment"}
    batch = tiny_batch(family)
    inputs = without_labels(batch)
    with torch.no_grad():
        before = model(**inputs).logits
        align_labels(model, ["Entailment", "neutral", "contradiction"])
        after = model(**inputs).logits
    torch.testing.assert_close(after, before[:, [2, 1, 0]], rtol=0, atol=0)
    assert model.config.id2label == {0: "Entailment", 1: "neutral", 2: "contradiction"}
    assert model.config.label2id["contradiction"] == 2


def test_classes_that_do_not_match_by_name_are_one_line_error():
    model = tiny_classifier("bert")  # classes LABEL_0, LABEL_1, LABEL_2
    with pytest.raises(ValueError) as info:
        align_labels(model, ["entailment", "neutral", "contradiction"])
    assert "\n" not in str(info.value)
    assert "['LABEL_0', 'LABEL_1', 'LABEL_2'] are not the task's label_names" in str(info.value)


def test_a_finetuned_checkpoint_is_evaluated_as_published(tmp_path, small_task, tokenizer):
    spec, train, dev = small_task
    published = tmp_path / "published"
    config = BertConfig(vocab_size=len(tokenizer), hidden_size=16, num_hidden_layers=1,
                        num_attention_heads=2, intermediate_size=32,
                        id2label={0: "contradiction", 1: "neutral", 2: "entailment"})
    BertForSequenceClassification(config).save_pretrained(published)
    tokenizer.save_pretrained(published)
    model_cfg = {**TINY_MODEL, "source": "finetuned", "pretrained": str(published)}
    metrics = run_finetune(spec, train, dev, tmp_path / "out", model=model_cfg,
                           pretrained=published)
    assert (metrics["epochs"], metrics["steps"], metrics["n_train"]) == (0, 0, 0)

    before, after = (load_file(p / "model.safetensors") for p in (published, tmp_path / "out"))
    # not trained: every weight as published, the classes' rows in the task's order
    for key in before:
        expected = before[key][[2, 1, 0]] if key.startswith("classifier.") else before[key]
        assert torch.equal(after[key], expected), key
    saved = AutoModelForSequenceClassification.from_pretrained(tmp_path / "out")
    assert saved.config.id2label == dict(enumerate(spec.label_names))
    data = encode(load_split(dev, spec), spec, tokenizer, TINY_MODEL["max_length"])
    assert accuracy(saved, data, 16, CPU) == metrics["dev_accuracy"]


def test_length_buckets_order_every_example_once_in_batches_of_similar_length():
    g = torch.Generator().manual_seed(0)
    lengths = torch.randint(5, 129, (1000,), generator=g)
    order = length_bucket_order(lengths, 8, torch.Generator().manual_seed(1))
    assert sorted(order.tolist()) == list(range(1000))
    spread = [int(np.ptp(lengths[batch].numpy())) for batch in order.split(8)]
    random_spread = [int(np.ptp(lengths[batch].numpy()))
                     for batch in torch.randperm(1000, generator=g).split(8)]
    assert np.mean(spread) < np.mean(random_spread) / 10
    # the seed decides the order, and no batch is sorted after the one before it
    assert torch.equal(order, length_bucket_order(lengths, 8, torch.Generator().manual_seed(1)))
    firsts = lengths[order[::8]]
    assert not torch.equal(firsts, firsts.sort().values)


def test_short_last_batch_stays_last():
    lengths = torch.arange(21)
    order = length_bucket_order(lengths, 4, torch.Generator().manual_seed(0))
    assert sorted(order.tolist()) == list(range(21))
    assert len(order.split(4)[-1]) == 1  # 21 = 5 x 4 + 1


def test_a_batch_padded_to_its_longest_example_gives_the_same_loss_and_gradients():
    model = tiny_classifier("bert")
    batch = tiny_batch("bert", lengths=(5, 7, 4))
    padded = {k: torch.cat([v, torch.zeros(len(v), 9, dtype=v.dtype)], dim=1) if v.dim() == 2
              else v for k, v in batch.items()}  # 9 more positions of padding everywhere
    trimmed = _trimmed(padded)
    assert trimmed["input_ids"].shape[1] == 7
    grads = []
    for inputs in (padded, trimmed):
        model.zero_grad()
        model(**inputs).loss.backward()
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters()
                                if p.grad is not None]))
    torch.testing.assert_close(grads[0], grads[1], rtol=1e-5, atol=1e-6)


def test_length_buckets_train_reproducibly(tmp_path, small_task):
    spec, train, dev = small_task
    bucketed = {**SHORT_TRAINING, "length_buckets": True}
    runs = [run_finetune(spec, train, dev, tmp_path / f"m{i}", training=bucketed, seed=3)
            for i in range(2)]
    assert runs[0]["train_loss"] == runs[1]["train_loss"] and runs[0]["steps"] == 2 * 6
    plain = run_finetune(spec, train, dev, tmp_path / "plain", seed=3)
    assert plain["train_loss"] != runs[0]["train_loss"]  # other batches: other numbers
    assert abs(plain["train_loss"] - runs[0]["train_loss"]) < 0.1


def test_out_of_memory_in_training_names_finetune_batch_size(tmp_path, small_task, monkeypatch):
    spec, train, dev = small_task
    out_of_memory_in(monkeypatch, training, "_train")
    with pytest.raises(ConfigError, match=(
            r"^out of GPU memory fine-tuning task syn_mnli \(up to \d+ tokens\) with "
            r"finetune.batch_size=16: lower it \(e.g. 8\) \(CUDA out of memory. Tried to "
            r"allocate 1.00 GiB\)$")):
        run_finetune(spec, train, dev, tmp_path / "model")
    assert not (tmp_path / "model").exists()


def test_out_of_memory_in_training_a_language_model_names_finetune_batch_size(monkeypatch):
    """A decoder's training is the classifiers' (`training._fit`): out of memory, it names
    the same setting."""
    out_of_memory_in(monkeypatch, training, "_train")
    model = {"source": "scratch", "max_length": 32, "scratch": {
        "family": "llama", "layers": 1, "heads": 2, "hidden": 16, "intermediate": 32}}
    with pytest.raises(ConfigError, match=(
            r"^out of GPU memory fine-tuning task induction \(up to \d+ tokens\) with "
            r"finetune.batch_size=16: lower it \(e.g. 8\)")):
        training.train_language_model(
            induction.generate(20, seed=0), induction.generate(10, seed=1),
            spec=PromptSpec("induction"), model_cfg=model, train_cfg=SHORT_TRAINING, device=CPU,
            seed=0)


PRETRAIN = {"epochs": 2, "batch_size": 32, "learning_rate": 1e-3, "mask_rate": 0.15}


def test_pretrained_start_is_one_vocabulary_and_one_set_of_weights_for_every_task(
        tmp_path, small_task, single_task):
    """model.pretrain: one masked-LM model over the union of the tasks' words and text, from
    which every task's classifier starts, so that head h is the same head in every task."""
    pair_spec, pair_train, pair_dev = small_task
    single_task["synthetic"].update(n_train=96, n_dev=32)
    single_train, single_dev = tmp_path / "single_train.parquet", tmp_path / "single_dev.parquet"
    prepare_task("syn_sst2", single_task, 0, single_train, single_dev)
    single_spec = TaskSpec.from_config("syn_sst2", single_task)
    start, metrics = tmp_path / "start", tmp_path / "start.json"
    pretrain_stage.run(ModelJob(
        rule="pretrain",
        inputs={"train": [str(pair_train), str(single_train)]},
        outputs={"model": str(start), "metrics": str(metrics)},
        settings={"tasks": {spec.name: columns(spec) for spec in (pair_spec, single_spec)},
                  "model": {**TINY_MODEL, "pretrain": PRETRAIN}, "seed": 0, **ON_CPU},
    ))
    metrics = json.loads(metrics.read_text())
    assert metrics["texts"] == 2 * 96 and metrics["epochs"] == 2
    assert metrics["mlm_loss"] < math.log(metrics["vocabulary"])  # it learned something
    tokenizer = AutoTokenizer.from_pretrained(start)
    words = set(training_words(load_split(pair_train, pair_spec), pair_spec)) | set(
        training_words(load_split(single_train, single_spec), single_spec))
    assert len(tokenizer) == len(words) + 5  # the special tokens
    # both tasks' classifiers start from the same encoder weights and vocabulary
    models = []
    for spec, train, dev in ((pair_spec, pair_train, pair_dev),
                             (single_spec, single_train, single_dev)):
        run_finetune(spec, train, dev, tmp_path / spec.name,
                     training={**SHORT_TRAINING, "learning_rate": 0.0}, start=start)
        models.append(load_file(tmp_path / spec.name / "model.safetensors"))
    encoder = [key for key in models[0] if key.startswith("bert.")]
    assert encoder and all(torch.equal(models[0][k], models[1][k]) for k in encoder)
    assert AutoTokenizer.from_pretrained(tmp_path / "syn_sst2").get_vocab() == tokenizer.get_vocab()
