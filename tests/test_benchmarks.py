"""The benchmarks run and report what docs/benchmarks.md reads from them (at a toy shape: the
numbers themselves are measured on real shapes, not here)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def run_script(script: str, out: Path, *options: str) -> dict:
    """Run benchmarks/`script` with `options`; its JSON report, written to `out`."""
    subprocess.run([sys.executable, f"benchmarks/{script}", *options, "--out", str(out)],
                   cwd=ROOT, check=True, capture_output=True)
    return json.loads(out.read_text())


def run_benchmark(script: str, out: Path, *options: str) -> dict:
    """Run benchmarks/`script` at a toy shape (one layer of 2 heads, hidden 16, 8 tokens, one
    thread) with `options`; its JSON report."""
    return run_script(script, out, "--layers", "1", "--heads", "2", "--hidden", "16",
                      "--tokens", "8", "--threads", "1", *options)


@pytest.mark.slow
def test_the_attribution_benchmark_compares_every_variant_and_records_its_code(tmp_path):
    # weights' std 0.5 at a toy shape: F(αA) steps, so the rules' errors differ by far more than
    # the float noise of any CPU (measured: Riemann-20 2.8 %, Gauss-Legendre 6 28 %, adaptive
    # 0.12 % with 22 nodes per layer); 4 examples also attributed end to end, as a job does
    report = run_benchmark("attribution.py", tmp_path / "attribution.json", "--examples", "2",
                           "--init", "0.5", "--shard-examples", "4")
    variants = report["variants"]
    assert set(variants) == {"naive_riemann_right_20", "engine_riemann_right_20",
                             "engine_gauss_legendre_6", "engine_adaptive",
                             "engine_adaptive_scan_4", "engine_adaptive_scan_2"}
    error = {name: v["completeness_error_median"] for name, v in variants.items()}
    # the engine computes the naive loop's Riemann sums, only faster
    assert error["engine_riemann_right_20"] == pytest.approx(error["naive_riemann_right_20"],
                                                             rel=1e-3)
    assert variants["engine_gauss_legendre_6"]["grad_nodes_mean"] == 6
    # on a steep path the adaptive rule spends more nodes than one panel and misses by less
    assert variants["engine_adaptive"]["grad_nodes_mean"] > 6
    assert error["engine_adaptive"] < error["naive_riemann_right_20"] / 5
    assert error["engine_adaptive"] < error["engine_gauss_legendre_6"] / 5
    assert report["target"]["variant"] == "engine_adaptive"
    provenance = report["provenance"]
    assert provenance["params"]["command"][0] == "attribution.py"
    assert len(provenance["code_version"]) == 12
    # the end-to-end shard: every example in the dump, each (example, layer) within the adaptive
    # rule's tolerance (its guarantee, on any CPU), on a path steep enough to need more than one
    # panel of 6 nodes (measured 26 nodes a layer)
    shard = report["end_to_end"]
    assert shard["rule"] == "adaptive" and shard["tolerance"] == 1e-3
    assert shard["examples"] == 4 and shard["within_tolerance"] == 1.0
    assert shard["grad_nodes_mean"] > 6 and shard["batch_size"] >= 1
    assert shard["tflop"] > 0 and shard["gpu_target"]["met"] is False  # 4 examples, on a CPU


@pytest.mark.slow
def test_the_finetune_benchmark_pads_buckets_less_than_random_batches(tmp_path):
    # 64 examples of 4 to 8 tokens in batches of 16: random batches pad to the longest (8),
    # length buckets to their own longest
    report = run_benchmark("finetune.py", tmp_path / "finetune.json", "--min-tokens", "4",
                           "--train-examples", "64", "--batch-size", "16")
    random, buckets = (report["variants"][name] for name in ("random_batches", "length_buckets"))
    assert random["mean_padded_width"] == 8
    assert buckets["mean_padded_width"] < 8  # measured 6.5 (the lengths are seeded)
    # a step's FLOPs grow with the padded width w between linearly and as w² (attention): so
    # the buckets' share of random batches' FLOPs lies between the widths' ratio and its square
    ratio = buckets["mean_padded_width"] / 8
    assert ratio**2 <= buckets["tflop"] / random["tflop"] <= ratio * 1.01  # 1 %: 4 digits kept
    for variant in (random, buckets):
        # the MNLI estimate is 3 epochs of 392,702 examples at the measured rate
        hours = 3 * 392_702 / variant["examples_per_s"] / 3600
        assert variant["mnli_3_epochs_hours"] == pytest.approx(hours, rel=1e-3)
    assert report["shape"]["train_examples"] == 64
    assert report["provenance"]["params"]["command"][0] == "finetune.py"


@pytest.mark.parametrize(("scan", "message"), [
    ("0", "config error: attribution.scan_steps: 0 is out of range (allowed: >= 1)"),
    ("50", "config error: attribution.max_steps: 120 is below 3 x attribution.scan_steps (50)"),
])
def test_the_quadrature_study_refuses_a_bad_scan_in_one_line_before_any_model_runs(scan, message):
    run = subprocess.run([sys.executable, "benchmarks/quadrature.py", "--scan-steps", scan],
                         cwd=ROOT, capture_output=True, text=True)
    assert run.returncode == 1
    assert run.stderr.strip() == message


@pytest.mark.slow
def test_the_real_shape_benchmark_agrees_with_the_naive_loop_and_captum(tmp_path):
    import pandas as pd
    from transformers import BertConfig, BertForSequenceClassification

    from attnlab.data.tokenization import build_tokenizer

    # a toy classifier and sentences of different lengths, so that padding and the engine's
    # passes of their own widths are exercised
    words = [f"w{k}" for k in range(40)]
    tokenizer = build_tokenizer(words)
    model = BertForSequenceClassification(BertConfig(
        vocab_size=len(tokenizer), num_hidden_layers=2, num_attention_heads=2, hidden_size=16,
        intermediate_size=32, num_labels=2))
    model.save_pretrained(tmp_path / "model")
    tokenizer.save_pretrained(tmp_path / "model")
    pd.DataFrame({"text": [" ".join(words[:n]) for n in (3, 11, 6)],
                  "label": [0, 1, 1]}).to_parquet(tmp_path / "dev.parquet")
    report = run_script("real_shape.py", tmp_path / "real_shape.json",
                        "--model", str(tmp_path / "model"), "--data", str(tmp_path / "dev.parquet"),
                        "--examples", "3", "--rounds", "1", "--profile-examples", "2",
                        "--threads", "1")
    variants = report["variants"]
    assert set(variants) == {"engine_adaptive", "engine_riemann_right_20",
                             "naive_riemann_right_20", "captum_riemann_right_20"}
    # the same Riemann sums three ways: equal to float32 rounding
    agreement = report["agreement"]
    for pair in ("engine_vs_naive", "engine_vs_captum", "naive_vs_captum"):
        assert agreement[pair] <= 1e-5 * agreement["attr_abs_max"]
    assert variants["naive_riemann_right_20"]["padding_share_of_flops"] == 0
    for entry in variants.values():
        assert entry["gflop_per_example"] >= entry["useful_gflop_per_example"] > 0
    assert set(report["ratios"]) == {f"{a}_vs_{b}" for a in ("engine_adaptive",
                                                             "engine_riemann_right_20")
                                     for b in ("naive_riemann_right_20",
                                               "captum_riemann_right_20")}
    profile = report["profile"]
    shares = ("matmul", "softmax", "layer_norm", "gelu", "other_ops", "outside_ops")
    assert sum(profile[name] for name in shares) == pytest.approx(1, abs=0.01)
    assert report["provenance"]["params"]["command"][0] == "real_shape.py"


@pytest.mark.slow
def test_the_pruning_benchmark_gives_the_old_codes_outputs_with_less_work(tmp_path):
    # the packaged MiniLM (make test installs it) on 4 sentences, the old code read from git
    report = run_script("pruning.py", tmp_path / "pruning.json", "--examples", "4",
                        "--importance-examples", "4", "--rounds", "1")
    loops = report["loops"]
    assert set(loops) == {"per_layer_curves", "global_curves", "accuracy_difference"}
    for loop in loops.values():
        # the same per-example outcomes; probabilities equal to float32 rounding
        assert loop["outcome_changes"] == 0 and loop["max_abs_difference"] <= 1e-6
        assert loop["layer_tokens_new"] <= loop["layer_tokens_old"]
    assert report["provenance"]["params"]["command"][0] == "pruning.py"


@pytest.mark.slow
def test_the_adversarial_attention_benchmark_gives_the_old_codes_tables_with_less_work(
        tmp_path):
    # the packaged MiniLM on 2 sentences at 5 steps a layer, the old code read from git
    report = run_script("adversarial_attention.py", tmp_path / "adversarial.json",
                        "--examples", "2", "--rounds", "1", "--steps", "5")
    # the same search: equal outcomes, JSD and TVD to float rounding
    assert report["outcome_changes"] == 0 and report["max_abs_difference"] <= 1e-6
    # layer passes of the one batch (2 rows), per attacked layer l of 6: the old code runs the
    # whole model for the capture, each of the 5 steps, the bound's check and the table's two
    # outputs (6 x 9); the new one runs the whole model for the capture and the table's
    # original output (12), the layers below l twice (the search's start and the table's
    # attacked output's), and from l for each step, the check and that output (7 x (6 - l))
    assert report["layer_rows_old"] == 2 * 6 * 6 * 9
    assert report["layer_rows_new"] == 2 * sum(12 + 2 * layer + 7 * (6 - layer)
                                               for layer in range(6))
    assert report["settings"]["steps"] == 5


@pytest.mark.slow
def test_the_stage_peaks_benchmark_counts_every_loops_flops_against_one_peak(tmp_path):
    # the packaged MiniLM on 2 sentences, one adversarial step a layer
    report = run_script("stage_peaks.py", tmp_path / "peaks.json", "--examples", "2",
                        "--search-steps", "1")
    loops = report["loops"]
    assert {"taylor_gradients", "adversarial_attention_search", "ranking_table",
            "token_mixing_probes", "occlusion", "finetune_step"} <= set(loops)
    for loop in loops.values():
        # matrix products counted (forward-mode and backward ones too), and the share is the
        # loop's rate over the one peak (to the rounding of the report)
        assert loop["gflop"] > 0 and loop["seconds"] > 0
        assert loop["share_of_peak"] == pytest.approx(
            loop["gflops"] / report["matmul_peak_gflops"], abs=2e-3)


@pytest.mark.slow
def test_the_occlusion_benchmark_gives_the_old_codes_scores_with_less_work(tmp_path):
    # the packaged MiniLM on one sentence cut to 8 tokens, the old code read from git
    report = run_script("occlusion.py", tmp_path / "occlusion.json", "--examples", "1",
                        "--rounds", "1", "--tokens", "8")
    # F is float32: the scores equal to its rounding carried through 6 layers
    assert report["max_abs_difference"] <= 1e-6 < report["largest_abs_score"]
    # token-layers: the old code runs the n(n − 1) = 56 copies of each layer l from l up, all
    # 8 rows; the new one, for l below the last, the occluded row at l, all rows of the layers
    # between and the projections of the last (a stopped pass, 8 rows), then its [CLS] row,
    # and one stopped pass at l (8 rows); of the last layer only [CLS]'s 7 edges, one row each
    assert report["layer_tokens_old"] == 56 * 8 * sum(6 - layer for layer in range(6))
    below = sum(56 * (1 + 8 * (4 - layer) + 8 + 1) + 8 for layer in range(5))
    assert report["layer_tokens_new"] == below + 7 + 8
    assert report["layer_tokens_stopped_new"] == 5 * 56 * 8 + 6 * 8


@pytest.mark.slow
def test_the_correlation_attribution_benchmark_attributes_only_what_head_importance_reads(
        tmp_path):
    # the packaged MiniLM on 2 dev examples, the first of them scoring the heads
    report = run_script("correlation_attribution.py", tmp_path / "correlation.json",
                        "--examples", "2", "--importance-examples", "1", "--rounds", "1")
    assert (report["attributed_old"], report["attributed_new"]) == (2, 1)
    # the head scores head_importance reads: the whole task's to the bit, the old code's to
    # float rounding (its batches held the other example too)
    assert report["differing_head_scores_whole"] == 0
    assert report["max_abs_difference"] <= 1e-6
    assert report["layer_tokens_new"] < report["layer_tokens_old"]


@pytest.mark.slow
def test_the_induction_dumps_benchmark_gives_the_same_tables_without_the_integral(tmp_path):
    # the induction config's decoder (trained, about 5 s) on 4 planted prompts
    report = run_script("induction_dumps.py", tmp_path / "induction.json", "--examples", "4")
    assert report["edges_equal"] and report["heads_equal"] and report["verdicts_equal"]
    assert report["claims_max_difference"] <= 1e-9  # measured 0: the same claims
    # both run the same masking passes; the old one the integral's scaled copies too: at
    # least 3 gradient nodes for each of the 4 prompts and 2 layers, each through both layers
    assert report["layer_rows_old"] - report["layer_rows_new"] >= 4 * 3 * 2 * 2


@pytest.mark.slow
def test_the_token_mixing_benchmark_times_every_batch_size_on_the_same_norms(tmp_path):
    # the packaged MiniLM on one sentence cut to 8 tokens: 8 probes a token, 64 products, in
    # one pass, in passes of 64 and in passes of 7 (the last one partial)
    report = run_script("token_mixing.py", tmp_path / "token_mixing.json", "--examples", "1",
                        "--rounds", "1", "--tokens", "8", "--batches", "512,64,7")
    assert report["products_per_example"] == [64] and report["baseline"] == "batch_512"
    assert set(report["seconds"]) == set(report["speedup_over_baseline"]) == {
        "batch_512", "batch_64", "batch_7"}
    assert report["speedup_over_baseline"]["batch_512"] == 1.0
    # float32 norms through 6 layers: other pass sizes may round the products' sums otherwise
    assert report["max_abs_difference"] <= 1e-5 * report["largest_norm"]
