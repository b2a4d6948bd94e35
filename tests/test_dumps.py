"""The attribution dump: what it keeps, how big it is, and that it is written safely."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from conftest import DEFAULT_CONFIG, learned_metrics, out_of_memory_in
from transformers import BertConfig, BertForSequenceClassification

from attnlab.analyses.attribution_summary import read_checked_dump, summarise_task
from attnlab.analyses.claims import COLUMNS
from attnlab.data.dumps import (
    attributed_head_scores,
    dump_frame,
    read_dump,
    read_task_dump,
    write_dump,
)
from attnlab.data.tasks import TaskSpec, load_split, prepare_task
from attnlab.data.tokenization import build_tokenizer, training_words
from attnlab.engine import dump_rows
from attnlab.engine.attribution import Attribution
from attnlab.engine.batch_size import CPU_BATCH_SIZE
from attnlab.engine.dump_rows import example_row
from attnlab.engine.models import load_classifier
from attnlab.job import Job
from attnlab.model_job import ModelJob
from attnlab.plumbing.errors import AttnlabError, ConfigError
from attnlab.stages import attribute, summarise_attributions

CFG = {"top_pairs": 3, "keep_full": False, "edge_min_fraction": 0.1, "max_edges_per_layer": 256}


def random_result(n_examples=2, layers=2, heads=3, width=6, real=(6, 4), seed=0) -> Attribution:
    g = torch.Generator().manual_seed(seed)
    attr = torch.randn(n_examples, layers, heads, width, width, generator=g)
    attention = torch.rand(n_examples, layers, heads, width, width, generator=g)
    for b, n in enumerate(real):
        attr[b, :, :, n:], attr[b, :, :, :, n:] = 0, 0
        attention[b, :, :, n:], attention[b, :, :, :, n:] = 0, 0
        attention[b, :, :, :n, :n] /= attention[b, :, :, :n, :n].sum(-1, keepdim=True)
    probs = torch.softmax(torch.randn(n_examples, 3, generator=g), -1)
    target = torch.zeros(n_examples, dtype=torch.long)
    f_zero = torch.rand(n_examples, layers, generator=g)
    residual = attr.double().sum(dim=(2, 3, 4)) - (probs[:, :1] - f_zero).double()
    return Attribution(attr, attention, probs, target, probs[:, 0], f_zero,
                       torch.full((n_examples, layers), 6), residual)


def dense_edges(row, layer):
    return {(i, j): s for ell, i, j, s in zip(row["edge_layer"], row["edge_i"], row["edge_j"],
                                             row["edge_score"], strict=True) if ell == layer}


def test_row_keeps_maxima_top_pairs_and_every_edge_above_the_floor():
    result = random_result()
    row = example_row(result, 1, CFG)  # the padded example: 4 real tokens of 6
    n = 4
    attr = result.attr[1, :, :, :n, :n]
    assert row["n_tokens"] == n
    assert row["attr_max"] == pytest.approx(attr.flatten(2).max(-1).values.flatten().tolist())
    assert row["attr_sum"] == pytest.approx(attr.sum(dim=(1, 2, 3)).tolist(), rel=1e-5)
    top = attr[1, 2].flatten().topk(3)
    assert row["top_score"][(1 * 3 + 2) * 3 : (1 * 3 + 3) * 3] == pytest.approx(top.values.tolist())
    for layer in range(2):
        a = attr[layer].sum(0)
        stored = dense_edges(row, layer)
        floor = row["edge_floor"][layer]
        reference = min(row["layer_max"][layer], row["layer_max_no_cls"][layer])
        assert floor == pytest.approx(0.1 * reference)
        for i in range(n):
            for j in range(n):
                if i != j and a[i, j] > floor:  # complete above the floor ...
                    assert stored[(i, j)] == pytest.approx(float(a[i, j]))
        assert all(i != j for i, j in stored)  # ... and never a self-edge
        scores = [s for (_, s) in sorted(stored.items(), key=lambda kv: -kv[1])]
        assert list(dense_edges(row, layer).values()) == scores  # strongest first
        assert row["row_sum"][layer * n : (layer + 1) * n] == pytest.approx(
            (a.sum(1) - a.diagonal()).tolist(), rel=1e-5, abs=1e-6)


def test_edges_above_the_layer_maximum_are_kept_when_only_cls_reads_positively():
    """Layer 0: only [CLS]'s row is positive, so the maximum over the other rows is not; a tree
    normalised by the whole layer's maximum still needs every edge above a fraction of it."""
    result = random_result(n_examples=1, real=(6,))
    layer = result.attr[0, 0]  # (H, S, S)
    layer.copy_(-layer.abs() - 0.01)
    layer[:, 0, 1:] = layer[:, 0, 1:].abs()
    row = example_row(result, 0, CFG)
    a = layer.sum(0)
    assert row["layer_max_no_cls"][0] < 0 < row["layer_max"][0]
    expected = {(0, j) for j in range(1, 6) if a[0, j] >= 0.1 * row["layer_max"][0]}
    assert len(expected) > 1 and set(dense_edges(row, 0)) == expected


def test_edge_cap_moves_the_floor_up():
    result = random_result(n_examples=1, real=(6,))
    row = example_row(result, 0, {**CFG, "edge_min_fraction": 1e-6, "max_edges_per_layer": 5})
    for layer in range(2):
        stored = dense_edges(row, layer)
        assert len(stored) == 5
        assert row["edge_floor"][layer] == pytest.approx(min(stored.values()))


def test_row_without_any_positive_attribution_still_keeps_its_strongest_edge():
    result = random_result(n_examples=1, real=(6,))
    result.attr[:] = -result.attr.abs() - 0.1
    row = example_row(result, 0, CFG)
    assert [layer for layer in row["edge_layer"]] == [0, 1]
    assert all(math.isfinite(f) for f in row["edge_floor"])


def test_paper_shape_dump_fits_the_200kb_budget(tmp_path):
    """12 layers x 12 heads x 128 tokens with random (incompressible) attributions."""
    result = random_result(n_examples=2, layers=12, heads=12, width=128, real=(128, 128))
    rows = []
    for b in range(2):
        row = example_row(result, b, CFG)
        row.update(idx=b, label=0, tokens=["w"] * 128, segments=[0] * 128,
                   planted_i=None, planted_j=None)
        rows.append(row)
    path = tmp_path / "part.parquet"
    write_dump(rows, path, {"n_layers": 12, "n_heads": 12})
    assert path.stat().st_size / 2 <= 200_000
    frame, meta = read_dump(path)
    assert len(frame) == 2 and meta["n_heads"] == 12
    assert len(frame["attr_max"].iloc[0]) == 144 and frame["attr_full"].isna().all()


def test_keep_full_stores_every_matrix():
    result = random_result(n_examples=1, real=(6,))
    row = example_row(result, 0, {**CFG, "keep_full": True})
    assert torch.tensor(row["attr_full"]).view(2, 3, 6, 6).allclose(result.attr[0])


def test_interrupted_write_leaves_no_file(tmp_path, monkeypatch):
    """A job killed half-way through writing leaves neither the file nor a partial twin."""

    def write_half_then_die(table, where, **kwargs):
        open(where, "wb").write(b"PAR1 half a file")
        raise KeyboardInterrupt

    monkeypatch.setattr("attnlab.data.dumps.pq.write_table", write_half_then_die)
    row = example_row(random_result(n_examples=1, real=(6,)), 0, CFG)
    with pytest.raises(KeyboardInterrupt):
        write_dump([row], tmp_path / "part.parquet", {})
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("n_examples,n_shards", [(10, 3), (2, 4), (0, 2), (7, 1)])
def test_shards_cover_every_example_once(n_examples, n_shards):
    covered = [i for shard in range(n_shards)
               for i in attribute.shard_rows(n_examples, shard, n_shards)]
    assert covered == list(range(n_examples))


def _shard_files(tmp_path, shards: list[tuple[int, int]]) -> list:
    """One-row dumps written as shard k of n, for each (k, n)."""
    row = example_row(random_result(n_examples=1, real=(6,)), 0, CFG)
    row.update(idx=0, label=0, tokens=["w"] * 6, segments=[0] * 6, planted_i=None, planted_j=None)
    paths = []
    for shard, n_shards in shards:
        paths.append(tmp_path / f"{shard}-of-{n_shards}.parquet")
        write_dump([row], paths[-1],
                   {"shard": shard, "n_shards": n_shards, "n_layers": 2, "n_heads": 3})
    return paths


def test_gathering_fails_when_a_shard_is_missing(tmp_path):
    paths = _shard_files(tmp_path, [(0, 3), (2, 3)])  # shard 1 of 3 never written
    with pytest.raises(AttnlabError, match=r"shards missing: \[1\]"):
        read_task_dump(paths)


def test_gathering_fails_on_shards_of_different_splits(tmp_path):
    paths = _shard_files(tmp_path, [(0, 2), (1, 3), (2, 3)])  # all of 0..2, but from two splits
    with pytest.raises(AttnlabError, match=r"from splits into \[2, 3\] shards"):
        read_task_dump(paths)


def test_summary_fails_when_the_config_asks_for_other_shards(tmp_path):
    paths = _shard_files(tmp_path, [(0, 2), (1, 2)])
    assert read_task_dump(paths)[0].shape[0] == 2
    with pytest.raises(AttnlabError, match="written for 2 shards, the config asks for 3"):
        read_checked_dump(paths, 3)


def test_the_summary_stage_writes_the_summary_and_no_claims_without_planted_pairs(tmp_path):
    paths = _shard_files(tmp_path, [(0, 2), (1, 2)])
    config = {**DEFAULT_CONFIG, "attribution": {**DEFAULT_CONFIG["attribution"], "shards": 2}}
    out = {"summary": tmp_path / "summary.json", "claims": tmp_path / "claims.parquet"}
    summarise_attributions.run(Job.from_config("summarise_attributions", config, task="syn_mnli",
                                               inputs={"parts": paths, "finetune_metrics":
                                                       learned_metrics(tmp_path)},
                                               outputs=out))
    summary = json.loads(out["summary"].read_text())
    assert summary["examples"] == 2 and summary["planted_pair_recovery"]["examples"] == 0
    claims = pd.read_parquet(out["claims"])
    assert claims.empty and list(claims.columns) == ["task", *COLUMNS]


def test_summary_reports_the_absolute_completeness_error_and_a_relative_one_above_a_floor(
        tmp_path):
    row = example_row(random_result(n_examples=1, real=(6,)), 0, CFG)
    row.update(idx=0, label=0, tokens=["w"] * 6, segments=[0] * 6, planted_i=None, planted_j=None)
    # layer 0: attributions miss F(A) - F(0·A) = 0.5 by 0.01; layer 1: F barely moves (1e-4)
    # and they miss by 1e-3, a small absolute error that is ten times the change
    row.update(f_full=0.9, f_zero=[0.4, 0.9 - 1e-4], attr_sum=[0.49, 1e-4 + 1e-3],
               residual=[-0.01, 1e-3], grad_nodes=[9, 33])
    path = tmp_path / "part.parquet"
    write_dump([row], path, {"shard": 0, "n_shards": 1, "n_layers": 2, "n_heads": 3})
    summary = summarise_task(read_checked_dump([path], 1), [path], tolerance=2e-3)
    # stored as float32 (~6e-8 resolution near 0.9): 1e-6 absolute, 1e-2 relative tolerances
    assert summary["completeness_abs_error"]["max"] == pytest.approx(0.01, abs=1e-6)
    assert summary["completeness_abs_error"]["median"] == pytest.approx(0.0055, abs=1e-6)
    # relative only where F moved by at least the stated floor: layer 0 (0.01 / 0.5); layer
    # 1's ten-fold "error" over a change of 1e-4 is counted below the floor instead
    relative = summary["completeness_rel_error"]
    assert relative["max"] == pytest.approx(0.02, rel=1e-2)
    assert relative["median"] == pytest.approx(0.02, rel=1e-2)
    assert (relative["change_floor"], relative["pairs"], relative["pairs_below_floor"]) == (
        0.05, 1, 1)
    assert "completeness_error" not in summary  # no unqualified error
    assert summary["within_tolerance"] == 0.5 and summary["outside_tolerance"] == 1
    assert summary["grad_nodes"]["mean"] == 21 and summary["grad_nodes"]["max"] == 33


def test_no_relative_completeness_error_where_no_layer_moves_f(tmp_path):
    row = example_row(random_result(n_examples=1, real=(6,)), 0, CFG)
    row.update(idx=0, label=0, tokens=["w"] * 6, segments=[0] * 6, planted_i=None, planted_j=None)
    # a saturated model: removing either layer moves F by 1e-8 (the 106,158-fold "error" of
    # an absolute 1e-3 over such a change is no quantity to report)
    row.update(f_full=0.99, f_zero=[0.99 - 1e-8] * 2, attr_sum=[1e-3, 0.0],
               residual=[1e-3, 1e-8], grad_nodes=[3, 3])
    path = tmp_path / "part.parquet"
    write_dump([row], path, {"shard": 0, "n_shards": 1, "n_layers": 2, "n_heads": 3})
    summary = summarise_task(read_checked_dump([path], 1), [path], tolerance=2e-3)
    assert summary["completeness_rel_error"] == {
        "median": None, "p90": None, "p99": None, "max": None, "change_floor": 0.05,
        "pairs": 0, "pairs_below_floor": 2}
    assert summary["completeness_abs_error"]["max"] == pytest.approx(1e-3, rel=1e-3)
    assert summary["within_tolerance"] == 1.0


def test_row_records_the_residual_and_nodes_of_every_layer():
    result = random_result()
    row = example_row(result, 1, CFG)
    assert row["grad_nodes"] == [6, 6]
    assert row["residual"] == pytest.approx(result.residual[1].tolist(), rel=1e-6)


def tiny_task_model(folder: Path, pair_task: dict, *, n_dev: int = 6, layers: int = 2,
                    init: float = 0.1) -> tuple[dict, Path, Path]:
    """A random tiny BERT (4 heads; weights of std `init`) saved with its word-level tokenizer,
    and a small synthetic dev split, in `folder`: what the stages read of a task (its task's
    section, model folder, dev path)."""
    pair_task["synthetic"].update(n_train=40, n_dev=n_dev)
    train, dev = folder / "train.parquet", folder / "dev.parquet"
    prepare_task("syn_mnli", pair_task, 0, train, dev)
    spec = TaskSpec.from_config("syn_mnli", pair_task)
    tokenizer = build_tokenizer(training_words(load_split(train, spec), spec))
    torch.manual_seed(0)
    model = BertForSequenceClassification(BertConfig(
        vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=layers,
        num_attention_heads=4, intermediate_size=48, num_labels=3, initializer_range=init))
    model.save_pretrained(folder / "model")
    tokenizer.save_pretrained(folder / "model")
    return pair_task, folder / "model", dev


@pytest.fixture
def tiny_shard(tmp_path, pair_task):
    return tiny_task_model(tmp_path, pair_task)


SHARD_CFG = {**DEFAULT_CONFIG["attribution"], "batch_size": "auto", "quadrature": "gauss_legendre",
             "steps": 6}
MODEL_CFG = {**DEFAULT_CONFIG["model"], "max_length": 64, "truncate": False}


def run_shard(tiny_shard, path, cfg=SHARD_CFG, *, role: str = "all",
              importance_examples: int = DEFAULT_CONFIG["heads"]["importance_examples"]) -> dict:
    """Rule attribute's job for shard 0 of 1 of the tiny task (of `role`, its heads scored on
    `importance_examples`), on the CPU; its summary."""
    task, model_dir, dev = tiny_shard
    config = {**DEFAULT_CONFIG, "tasks": {"syn_mnli": {**task, "role": role}},
              "attribution": cfg, "model": MODEL_CFG, "device": "cpu",
              "heads": {**DEFAULT_CONFIG["heads"], "importance_examples": importance_examples}}
    job = ModelJob.from_config("attribute", config, task="syn_mnli",
                               inputs={"model": model_dir, "dev": dev},
                               outputs={"part": path, "summary": path.with_suffix(".json")})
    attribute.run(replace(job, wildcards={**job.wildcards, "shard": "0"}))
    return json.loads(path.with_suffix(".json").read_text())


def test_shard_with_auto_batch_size_takes_the_cpu_default(tiny_shard, tmp_path):
    summary = run_shard(tiny_shard, tmp_path / "auto.parquet")
    assert summary["batch_size"] == CPU_BATCH_SIZE and summary["examples"] == 6
    explicit = run_shard(tiny_shard, tmp_path / "five.parquet", {**SHARD_CFG, "batch_size": 5})
    assert explicit["batch_size"] == 5
    auto, _ = read_dump(tmp_path / "auto.parquet")
    five, _ = read_dump(tmp_path / "five.parquet")
    assert np.allclose(np.stack(auto["attr_max"]), np.stack(five["attr_max"]), atol=1e-6)


def test_a_correlation_task_attributes_only_what_head_importance_reads_to_the_bit(
        tiny_shard, tmp_path):
    # 6 dev examples, the first 4 scoring the heads: in batches of their own, so that a task
    # attributing only them (role correlation) gives them as a task attributing all 6 does
    whole = run_shard(tiny_shard, tmp_path / "whole.parquet", importance_examples=4)
    first = run_shard(tiny_shard, tmp_path / "first.parquet", importance_examples=4,
                      role="correlation")
    assert (whole["examples"], first["examples"]) == (6, 4)
    whole_dump, _ = read_dump(tmp_path / "whole.parquet")
    first_dump, _ = read_dump(tmp_path / "first.parquet")
    assert whole_dump.iloc[:4].reset_index(drop=True).equals(first_dump)
    dev = pd.read_parquet(tiny_shard[2])
    scores = [attributed_head_scores([tmp_path / f"{name}.parquet"], dev, head_shape=(2, 4),
                                     target="gold") for name in ("whole", "first")]
    for name, array in scores[1].items():
        assert np.array_equal(scores[0][name][:4], array)


def test_a_shard_without_examples_writes_an_empty_dump(tiny_shard, tmp_path):
    # 6 dev examples in 20 shards: shard 0 has none
    summary = run_shard(tiny_shard, tmp_path / "empty.parquet", {**SHARD_CFG, "shards": 20})
    assert summary["examples"] == 0 and summary["accuracy"] is None
    dump, meta = read_dump(tmp_path / "empty.parquet")
    assert dump.empty and (meta["n_layers"], meta["n_heads"], meta["n_shards"]) == (2, 4, 20)


def test_bf16_shard_stays_near_float32(tiny_shard):
    # bfloat16 autocast as a job on a GPU with precision bf16 runs it, here on the CPU
    task, model_dir, dev = tiny_shard
    spec = TaskSpec.from_config("syn_mnli", task)
    model, tokenizer = load_classifier(model_dir)
    fp32, bf16 = (dump_frame(dump_rows.dump_rows(model, tokenizer, load_split(dev, spec), spec,
                                                 SHARD_CFG, MODEL_CFG, bf16=low).rows)
                  for low in (False, True))
    maxima = {name: np.stack(dump["attr_max"]) for name, dump in (("32", fp32), ("16", bf16))}
    change = np.abs(maxima["16"] - maxima["32"]).max() / np.abs(maxima["32"]).max()
    assert 1e-5 < change < 0.05  # bfloat16 did run, and moved the largest entries by < 5%
    # F and the completeness residual: within the default tolerance of float32's (docs/gpu.md)
    assert np.abs(bf16["f_full"] - fp32["f_full"]).max() < 2e-3
    assert np.abs(np.stack(bf16["residual"])).max() < 2e-3
    assert np.abs(np.stack(fp32["residual"])).max() < 1e-5


def test_dump_frame_is_what_a_written_dump_reads_back(tmp_path):
    result = random_result()
    rows = [{**example_row(result, b, CFG), "idx": b, "label": 0, "tokens": ["w"] * n,
             "segments": [0] * n, "planted_i": None, "planted_j": None}
            for b, n in enumerate((6, 4))]
    write_dump(rows, tmp_path / "part.parquet", {})
    written, _ = read_dump(tmp_path / "part.parquet")
    pd.testing.assert_frame_equal(dump_frame(rows), written, check_exact=True)


def test_out_of_memory_in_a_shard_names_attribution_batch_size(tiny_shard, tmp_path, monkeypatch):
    out_of_memory_in(monkeypatch, dump_rows, "attribute")
    with pytest.raises(ConfigError, match=(
            r"^out of GPU memory attributing task syn_mnli \(32 rows per pass, up to \d+ tokens\) "
            r"with attribution.batch_size=auto: lower it to an integer that fits \(CUDA out of "
            r"memory. Tried to allocate 1.00 GiB\)$")):
        run_shard(tiny_shard, tmp_path / "oom.parquet")
    assert not (tmp_path / "oom.parquet").exists()
