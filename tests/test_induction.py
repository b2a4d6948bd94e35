"""The planted induction task: its ground truth, its encoding, and a decoder that learns it."""

import json
import re

import numpy as np
import pandas as pd
import pytest
import torch

from attnlab.analyses import induction as induction_analysis
from attnlab.analyses.claims import unlearned
from attnlab.analyses.verdicts import seeds_needed
from attnlab.data import induction
from attnlab.data.prompts import PromptSpec, validate_prompts
from attnlab.data.tasks import DataError, Origin
from attnlab.data.tokenization import build_causal_tokenizer
from attnlab.engine import next_token
from attnlab.methods import registry

SPEC = PromptSpec("induction")


def test_same_seed_same_frame_and_different_seed_different():
    first = induction.generate(50, seed=3)
    pd.testing.assert_frame_equal(first, induction.generate(50, seed=3))
    assert not first.equals(induction.generate(50, seed=4))
    assert list(first.columns) == induction.COLUMNS


def test_ground_truth_positions_are_the_planted_a_and_b():
    frame = induction.generate(500, seed=0)
    for row in frame.itertuples():
        words = row.text.split(" ")
        a, b = words[row.gt_previous], words[row.gt_induction]
        # "... A B ... A": the last word is A, B follows its only earlier occurrence
        assert words[-1] == a and b == row.target
        assert row.gt_induction == row.gt_previous + 1
        assert words.count(a) == 2 and words.count(b) == 1
        # everything from the repeat on copies the segment starting gt_previous - k back
        repeat = words[row.repeat_start :]
        start = row.gt_previous - (len(repeat) - 1)
        assert words[start : row.gt_previous + 1] == repeat
        # every word outside the repeat is distinct: no other earlier A, no ambiguous B
        assert len(set(words[: row.repeat_start])) == row.repeat_start


def test_encoding_puts_target_after_the_query_and_maps_word_positions_to_tokens():
    frame = induction.generate(40, seed=1)
    tokenizer = build_causal_tokenizer(induction.words())
    data = next_token.encode_prompts(frame, SPEC, tokenizer, max_length=32)
    rows = torch.arange(len(frame))
    # <s> comes first, so word w is token w + 1
    assert (data["input_ids"][:, 0] == tokenizer.bos_token_id).all()
    lengths = torch.tensor([len(text.split(" ")) for text in frame["text"]])
    assert data["query"].tolist() == lengths.tolist()
    assert tokenizer.convert_ids_to_tokens(data["target"].tolist()) == frame["target"].tolist()
    assert (data["input_ids"][rows, data["query"]] ==
            data["input_ids"][rows, torch.tensor(frame["gt_previous"]) + 1]).all()
    assert next_token.token_positions(frame, SPEC, tokenizer, "gt_induction") == [
        p + 1 for p in frame["gt_induction"]]
    assert data["train_from"].tolist() == [p + 1 for p in frame["repeat_start"]]


def test_prompts_too_long_or_without_a_target_are_refused_in_one_line():
    frame = induction.generate(5, seed=1)
    tokenizer = build_causal_tokenizer(induction.words())
    with pytest.raises(DataError, match="more than model.max_length=8"):
        next_token.encode_prompts(frame, SPEC, tokenizer, max_length=8)
    with pytest.raises(DataError, match="prompts.csv: row 2: column 'target' is not a "
                                        "non-empty text"):
        validate_prompts(frame.assign(target=["v1", "v2", " ", "v3", "v4"]), SPEC,
                         Origin("prompts.csv"))


SENTENCES = [
    "the film is grossly contradictory in conveying its social message",
    # a repeated word ("a" again) starts the run after its first occurrence, punctuation
    # breaks one
    "a b a c d , e f g h",
    "too short for a run",
    "one two three four five six seven",
]


def test_real_sentences_are_made_into_repeat_prompts_with_the_same_ground_truth():
    assert induction.distinct_run(SENTENCES[0], 5) == ["the", "film", "is", "grossly",
                                                       "contradictory"]
    assert induction.distinct_run(SENTENCES[1], 4) == ["b", "a", "c", "d"]
    assert induction.distinct_run(SENTENCES[1], 5) is None
    assert induction.distinct_run(SENTENCES[2], 6) is None
    frame = induction.repeated_sentences(SENTENCES, 6, seed=0)
    # the sentences with 6 consecutive distinct words of letters: the first, the last
    assert len(frame) == 2 and list(frame.columns) == induction.COLUMNS
    pd.testing.assert_frame_equal(frame, induction.repeated_sentences(SENTENCES, 6, seed=0))
    for row in frame.itertuples():
        words = row.text.split(" ")
        run = words[1:7]
        assert words[0] == induction.DOCUMENT_START
        assert " ".join(run) in ("the film is grossly contradictory in",
                                 "one two three four five six")
        # the protocol: the run, then the run again up to A, whose next word B is the target
        assert row.repeat_start == 7 and words[7:] == run[: len(words) - 7]
        assert words[-1] == words[row.gt_previous] and row.target == words[row.gt_induction]
        assert row.gt_induction == row.gt_previous + 1


def test_a_task_of_real_sentences_draws_dev_prompts_from_sentences_train_does_not_hold(
        tmp_path):
    from attnlab.data.prompts import read_prompts

    # 30 sentences, each with its own first word (the letters of its number), and 5 without a
    # run of 4 (punctuation)
    tags = ["".join("abcdefghij"[int(d)] for d in f"{i:02d}") for i in range(30)]
    sentences = [f"{tag} x y z and more words" for tag in tags] + ["a , b"] * 5
    split = tmp_path / "train.parquet"
    pd.DataFrame({"text": sentences, "label": 0}).to_parquet(split)
    task = {"kind": "next_token", "source": "hub", "text_fields": ["text"],
            "hub": {"path": "x/y", "name": None, "dev_split": None},
            "repeat": {"length": 4, "n_train": 10, "n_dev": 20}}
    spec, train, dev, origins = read_prompts("reviews", task, 0, {"train": split})
    assert (len(train), len(dev)) == (10, 20) and list(dev["idx"]) == list(range(20))
    first = {text.split(" ")[1] for text in train["text"]}
    assert not first & {text.split(" ")[1] for text in dev["text"]}
    assert "held" not in origins[0].where and "no train prompt holds" in origins[1].where
    task["repeat"]["n_dev"] = 21
    with pytest.raises(DataError) as error:
        read_prompts("reviews", task, 0, {"train": split})
    assert str(error.value) == (
        f"tasks.reviews.repeat.n_dev: 21 dev prompts asked for, and {split} (the sentences no "
        "train prompt holds) has 20 sentences with 4 consecutive distinct words of letters")


# The induction config's model and training (config/induction.yaml), on fewer examples.
INDUCTION_MODEL = {"source": "scratch", "max_length": 32, "scratch": {
    "family": "llama", "layers": 2, "heads": 4, "hidden": 64, "intermediate": 64,
    "dropout": 0.0}}
INDUCTION_TRAINING = {"epochs": 20, "batch_size": 64, "learning_rate": 3e-3, "warmup": 0.05,
                      "weight_decay": 0.01, "stop_loss": 0.05}


def _trained(seed: int):
    """The induction config's decoder trained with `seed`: about 5 s on a free machine."""
    from attnlab.engine import training

    return training.train_language_model(
        induction.generate(3000, seed=0), induction.generate(300, seed=1), spec=SPEC,
        model_cfg=INDUCTION_MODEL, train_cfg=INDUCTION_TRAINING, device=torch.device("cpu"),
        seed=seed)


def _analysed(trained, n: int = 100):
    """The induction analysis of `trained` on the first n dev examples."""
    from attnlab.analyses.induction import induction_analysis
    from attnlab.engine import attribution, models

    dev = induction.generate(n, seed=1)
    model, tokenizer = models.prepare_model(trained.model), trained.tokenizer
    data = next_token.encode_prompts(dev, SPEC, tokenizer, max_length=32)
    truth = {column: torch.tensor(next_token.token_positions(dev, SPEC, tokenizer, column))
             for column in ("gt_induction", "gt_previous")}
    inputs = next_token.prompt_inputs(data)
    # a fixed rule of 20 nodes: the analysis compares where edges point, not their last digit
    attr = attribution.attribute(model, inputs, target=inputs["labels"],
                                 quadrature="riemann_right", steps=20).attr.numpy()
    return induction_analysis(model, inputs, attr=attr, induction=truth["gt_induction"],
                              previous=truth["gt_previous"])


@pytest.fixture(scope="module")
def induction_model():
    return _trained(seed=0)


@pytest.fixture(scope="module")
def induction_result(induction_model):
    """The induction analysis of the seed-0 model (shared by the tests that read it)."""
    return _analysed(induction_model)


def test_a_tiny_decoder_learns_induction_on_held_out_sequences(induction_model):
    metrics = induction_model.metrics
    # before its phase change (Olsson et al. 2022) it is right at most 0.4-0.6 of the time
    # (guessing a word of the prompt); after it, 1.0 on unseen sequences
    assert metrics["dev_accuracy"] >= 0.9, metrics
    assert metrics["train_loss"] < INDUCTION_TRAINING["stop_loss"]


def _induction_config(**changes):
    import copy

    import yaml

    from attnlab.plumbing.config import validate_config

    config = yaml.safe_load(open("config/induction.yaml"))
    for path, value in changes.items():
        *parents, key = path.split(".")
        section = config
        for name in parents:
            section = section[name]
        section[key] = copy.deepcopy(value)
    return validate_config(config)


@pytest.mark.parametrize(("changes", "message"), [
    ({"model.scratch.family": "bert"},
     "model.scratch.family: 'bert' cannot learn next_token tasks; use gpt2 or llama"),
    ({"tasks.induction.synthetic.kind": "pair2"},
     "tasks.induction.synthetic.kind: 'pair2' does not make next_token tasks"),
    ({"tasks.other": {"source": "synthetic", "synthetic": {"kind": "single2"},
                      "text_fields": ["sentence"], "label_names": ["negative", "positive"]}},
     "tasks: the tasks are of different kinds"),
    ({"heads": {"dissimilar_pairs": [["induction", "induction"]]}},
     "heads.dissimilar_pairs: the cross-task correlation of head importance is not run for "
     "next_token tasks"),
    ({"trees": {"normalise": "no_cls"}},
     "trees.normalise: 'no_cls' leaves out a classifier's "),
    ({"model.truncate": True},
     "model.truncate: a next_token task's prompts are never truncated; raise model.max_length"),
    # rule induction reads the dumps' full matrices of its examples
    ({"attribution.keep_full": False},
     "attribution.keep_full: false; rule induction reads the full attribution matrices"),
    ({"attribution.max_examples": 50},
     "induction.examples: 200 is more than the 50 examples rule attribute attributes"),
    # real sentences are made into prompts from a hub or local source only; a hub's rows are
    # sentences, not prompts
    ({"tasks.induction.shuffle_labels": True},
     "tasks.induction.shuffle_labels: a next_token task has no labels to shuffle"),
    ({"tasks.induction.repeat": {"length": 4}},
     "tasks.induction.repeat: makes next_token prompts of the sentences of a hub or local "
     "source; this task is next_token from 'synthetic': leave repeat out"),
    ({"tasks.induction": {"kind": "next_token", "source": "hub", "hub": {"path": "x/y"},
                          "text_fields": ["text"]}},
     "tasks.induction.source: 'hub'; a next_token task's data is synthetic (induction or "
     "repeat), local (prompts and targets), or the sentences of a hub or local source made "
     "into repeat prompts (tasks.induction.repeat)"),
])
def test_a_config_that_mixes_decoders_and_classifiers_stops_the_dry_run_in_one_line(
        changes, message):
    from attnlab.plumbing.errors import ConfigError
    from attnlab.plumbing.preflight import check_config

    check_config(_induction_config(), None)  # the shipped config passes
    with pytest.raises(ConfigError, match=re.escape(message)):
        check_config(_induction_config(**changes), None)


def test_attattr_finds_the_planted_mechanism_on_the_trained_model(induction_result):
    result = induction_result
    # The claims' verdicts are judged over seeds (below): of one seed's, none is guaranteed on
    # another CPU's float path. What this seed shows, with margins: AttAttr's strongest edge
    # at the query points to B (observed 1.0 of the examples; 0.9 for another CPU)
    assert result.summary["share_attattr"] >= 0.9
    # the attribution tree rooted at the query: its top node is B and its layer-0 edge B <- A
    # (observed 0.99 of the examples; 0.9 leaves a margin for another CPU's float path)
    edges = result.edges
    assert (edges["tree_top"] == edges["induction"]).mean() >= 0.9
    assert result.summary["tree_share"] >= 0.9 and edges["tree_path"].mean() >= 0.9
    heads = result.heads
    assert heads["previous_token_head"].sum() >= 1 and heads["induction_head"].sum() >= 1
    # the previous-token head reads from the layer below the induction heads
    assert heads.loc[heads["previous_token_head"], "layer"].max() < heads.loc[
        heads["induction_head"], "layer"].min()


def test_effective_attention_of_the_trained_decoder_keeps_its_output(induction_model):
    """Effective attention (Brunner et al. 2020) on the trained Llama, 30 dev prompts of 13-32
    tokens, d_v = 16: A_eff·V = A·V (float64, row by row within the causal mask), and the
    identifiability statements judged as on an encoder."""
    import copy

    from attnlab.analyses import effective_attention as ea
    from attnlab.engine import examples, models
    from attnlab.engine.intervention import Intervention

    model = models.prepare_model(copy.deepcopy(induction_model.model)).double()
    tokenizer = induction_model.tokenizer
    inputs = examples.encoded_frame(induction.generate(30, seed=1), SPEC, tokenizer,
                                    INDUCTION_MODEL)
    capture = Intervention(capture=True, capture_values=True)
    with torch.no_grad():
        models.logits(model, inputs, capture)
    allowed = ea.allowed_keys(model, inputs)
    for layer in capture.probs:
        for row, real in enumerate(inputs["attention_mask"].bool()):
            a = capture.probs[layer][row][:, real][..., real]
            t = capture.values[layer][row][:, real]
            keys = allowed[row, layer][:, real][..., real]
            eff, _ = ea.effective_attention(a, t, keys)
            # 1e-10 relative: the float64 projection is exact to rounding
            assert (eff @ t - a @ t).norm() / (a @ t).norm() <= 1e-10
            assert (eff[..., ~keys[0]] == 0).all()
    per_head, mass = ea.analyse_examples(model, tokenizer, inputs)
    d_v = int(per_head["d_v"].iloc[0])
    assert d_v == 16 and per_head["length"].max() > d_v
    verdicts = {c["claim"]: c["verdict"] for c in ea.claims(per_head, mass, d_v, decoder=True)}
    # beyond d_v the last rows see more keys than d_v: a null space in every head
    assert verdicts["beyond d_v tokens attention weights are not identifiable: the values' "
                    "left null space is non-trivial"] == "holds"
    assert set(mass["category"]) == {"[BOS]"}  # every prompt starts with <s>


@pytest.mark.slow
def test_a_task_for_the_induction_heads_only_runs_what_rule_induction_heads_reads(tmp_path):
    """A second task of real sentences (a local file, made into repeat prompts) with role
    induction_heads: a dry run plans only that analysis and what it reads on it."""
    import yaml
    from test_workflow import jobs_of, snakemake

    sentences = tmp_path / "sentences.csv"
    sentences.write_text("text\none two three four five six\n")
    config = yaml.safe_load(open("config/induction.yaml"))
    config["tasks"]["reviews"] = {
        "kind": "next_token", "role": "induction_heads", "source": "local",
        "local": {"train": str(sentences), "dev": str(sentences)},
        "repeat": {"length": 4, "n_train": 1, "n_dev": 2}, "text_fields": ["text"]}
    # one prompt ranks the heads, the other is ablated (the dry run checks that both fit)
    config["induction"].update(head_examples=1, ablation_examples=1)
    configfile = tmp_path / "config.yaml"
    configfile.write_text(yaml.safe_dump(config))
    result = snakemake("-n", "--cores", "2", "--configfile", str(configfile), "--directory",
                       str(tmp_path))
    planned = {(job.rule, job.wildcards.get("task")) for job in jobs_of(result.stdout)}
    assert {rule for rule, task in planned if task == "reviews"} == {
        "prepare_data", "finetune", "attribute", "summarise_attributions", "induction_heads"}
    assert {rule for rule, task in planned if task == "induction"} > {
        "induction", "induction_heads", "trees", "prune_eval", "interaction_methods"}


def test_the_induction_config_runs_through_the_snakemake_command_line(tmp_path):
    """config/induction.yaml with fewer dev examples, through the real CLI: prepare_data,
    finetune (training the decoder), attribute, summarise_attributions, trees, example_views,
    head_importance, prune_eval, pruning_figures, effective_attention, interaction_methods (12
    examples), induction, induction_heads, the run summary and the claims page."""
    import yaml
    from test_explorer import embedded
    from test_workflow import assert_verdicts_follow, snakemake

    config = yaml.safe_load(open("config/induction.yaml"))
    config["name"] = "tiny_induction"
    config["tasks"]["induction"]["synthetic"]["n_dev"] = 60
    # 30 dev examples score the heads, the other 30 evaluate global pruning
    config["heads"].update(importance_examples=30, min_evaluation_examples=30)
    config["induction"].update(examples=60, head_examples=30, ablation_examples=30)
    config["interaction_methods"]["examples"] = 12
    config["identifiability"]["effective_attention"]["examples"] = 30  # some beyond d_v = 16
    configfile = tmp_path / "config.yaml"
    configfile.write_text(yaml.safe_dump(config))
    args = ("--cores", "2", "--configfile", str(configfile), "--directory", str(tmp_path))
    planned = snakemake("-n", *args).stdout
    # the classification stages are left out by the config's kind, not run and failed
    for rule in ("mine_triggers", "attack_eval", "token_identifiability"):
        assert f"rule {rule}:" not in planned
    snakemake(*args, timeout=600)
    results = tmp_path / "results" / "tiny_induction"
    metrics = json.loads((results / "finetune/induction/metrics.json").read_text())
    assert metrics["dev_accuracy"] >= 0.9, metrics  # observed 1.0 (the seed of the config)
    # the eight claims of rule induction, judged (their verdicts over seeds: the test below);
    # AttAttr's strongest edge at the query points to B (observed 1.0; 0.9 for another CPU)
    claims = pd.read_parquet(results / "induction/induction/claims.parquet")
    assert len(claims) == 8
    # the top two heads, ranked on all the examples, are the mechanism's in every resample of
    # them: an interval of no width, which is not judged (analyses.verdicts.untestable)
    top_two = claims["claim"] == MECHANISM_CLAIM
    # AttAttr against raw attention or rollout: where both find B in every example (on some
    # CPUs' float path raw attention does too), the paired difference sits at the ceiling,
    # which is not judged; no other reason leaves one of them untested
    compared = claims["claim"].str.contains("more often than")
    assert (claims.loc[~top_two & ~compared, "verdict"] != "not testable").all(), \
        claims.to_string()
    untested = claims[compared & (claims["verdict"] == "not testable")]
    assert untested["reason"].str.startswith("at the ceiling").all(), claims.to_string()
    assert claims.loc[top_two, "reason"].isin(["", NO_WIDTH_ONE]).all()
    assert (claims["kind"] == "finding").all() and claims["low"].notna().all()
    assert claims.loc[0, "value"] >= 0.9, claims.to_string()
    # the dumps' and the trees' ground-truth claims, on the planted pair (query, B)
    for path in ("attribution_summary/induction_claims.parquet",
                 "trees/induction/claims.parquet"):
        assert (pd.read_parquet(results / path).loc[0, "verdict"] == "holds"), path
    # Hao et al.'s pruning claims on next-token accuracy (docs/decoders.md): pruning by
    # attribution keeps both heads the task needs longest, so it beats a random order
    pruning = pd.read_parquet(results / "heads/induction/claims.parquet").set_index("claim")
    # the 7 pruning findings of the paper's (analyses.pruning) and this project's 5: the gold
    # label's leak and the four per-layer findings on the predicted label's ranking
    assert len(pruning) == 7 + 5, pruning.to_string()
    assert pruning.loc["attribution beats a random head order", "value"] >= 0.15
    assert (results / "heads/pruning_global.png").is_file()
    # the views: a decoder's tree in the explorer is rooted at the last token
    data = embedded((results / "views/induction/explorer.html").read_text())
    examples = data["examples"]
    assert examples and all(ex["root"] == len(ex["tokens"]) - 1 for ex in examples), data
    assert (results / "report/claims.html").is_file()
    assert (results / "report/run_summary.html").is_file()
    assert_verdicts_follow(results)
    # effective attention: A_eff differs from A beyond d_v = 16 (the last rows see more keys);
    # [SEP] is not testable on a decoder
    effective = pd.read_parquet(results / "identifiability/induction/"
                                "effective_attention_claims.parquet").set_index("claim")
    assert effective.loc["beyond d_v tokens part of the attention does not reach the head's "
                         "output (A_eff differs from A)", "verdict"] == "holds"
    assert effective.loc["effective attention to [SEP] is lower than raw attention",
                         "verdict"] == "not testable"
    # the leaderboard without ALTI and GlobEnc (post-LN); AttAttr's top edge is (query, B) in
    # every example (observed 24 of 24 at the config's seed) and it beats random edges
    intervals = pd.read_parquet(results / "interaction_methods/induction/intervals.parquet")
    trained = intervals[intervals["model"] == "trained"].set_index(["method", "measure"])
    assert set(intervals["method"]) == {
        *(method.name for method in registry.METHODS if method.decoders), "random"}
    assert not {"alti", "globenc"} & set(intervals["method"])
    assert trained.loc[("attattr", "planted_hit"), "mean"] >= 0.9
    verdicts = pd.read_parquet(results / "interaction_methods/induction/claims.parquet")
    assert (verdicts.set_index("claim").loc["AttAttr beats random on edge deletion AOPC, "
                                            "target-class probability (signed)", "verdict"]
            == "holds")


# The finding on the top two heads, ranked on all the examples, and its reason where they are
# the mechanism's in every resample of the examples (an interval of no width is not judged)
MECHANISM_CLAIM = "AttAttr's top two heads are induction or previous-token heads"
NO_WIDTH_ONE = "every resample of the units gives 1: no interval"

# The findings that the trained model's mechanism makes hold. At the query raw attention and
# rollout point at B about as often as AttAttr (0.995, 0.990 against 1.0 on seed 0): those two
# comparisons are inconclusive, and must never fail.
MECHANISM_FINDINGS = [0, 3, 4, 5, 6, 7]


@pytest.mark.slow
@pytest.mark.xfail(strict=True, reason=(
    "judged on their intervals over the 100 analysed examples, the six mechanism findings held "
    "together on 3 of 5 seeds (seed 3: the previous-token step's (layer 0) and the tree's "
    "shares have intervals that contain the bar of 0.9); the examples a finding needs are for "
    "the power note of issue 42 to size, not for this test to loosen"))
def test_the_induction_findings_hold_on_four_of_five_seeds(induction_model, induction_result):
    """Seeds 0-4 of the induction config's training (seed 0's model and analysis are the other
    tests'): about 25 s on a free machine. The mechanism's findings hold on at least 4 of 5
    seeds (the run's rule, verdicts.seeds_needed), and AttAttr never finds B less often than
    raw attention or rollout."""
    held = {0: (induction_model.metrics["dev_accuracy"], list(induction_result.claims["verdict"]))}
    for seed in range(1, 5):
        trained = _trained(seed)
        claims = _analysed(trained).claims
        held[seed] = (trained.metrics["dev_accuracy"], list(claims["verdict"]))
    assert all(len(verdicts) == 8 for _, verdicts in held.values()), held
    assert sum(all(verdicts[i] == "holds" for i in MECHANISM_FINDINGS)
               for _, verdicts in held.values()) >= seeds_needed(5), held
    assert all(verdicts[i] != "does not hold" for _, verdicts in held.values() for i in (1, 2)), \
        held


def test_each_induction_finding_is_judged_on_its_interval_over_the_examples():
    """Constructed examples: AttAttr finds B and the previous-token step everywhere, raw
    attention half as often; the top two heads by attribution are the mechanism's; masking them
    loses every example, the costliest other pair none. Every finding holds, each with its
    interval over the 40 examples and its source, but the top two heads': every example is
    alike, so every resample ranks the same two heads first, an interval of no width, which
    is not judged."""
    n = 40
    edges = pd.DataFrame({"induction": 5, "top_attattr": 5, "top_rollout": [5, 4] * (n // 2),
                          "top_attention": [5, 4] * (n // 2), "path_attattr": True,
                          "path_attention": [True, False] * (n // 2), "tree_path": True},
                         index=range(n))
    # heads (layer-major, 2 x 2): importance, attention at the query on B, at B on A
    per_head = np.array([[1.0, 0.1, 0.9], [0.2, 0.1, 0.1], [0.8, 0.9, 0.1], [0.1, 0.2, 0.1]])
    per_example = np.repeat(per_head.T[None], n, axis=0)
    masking = induction_analysis.Masking(full=np.ones(n, bool), top=np.zeros(n, bool),
                                         worst_other=np.ones(n, bool), other_mean_drop=0.0)
    rows = pd.DataFrame(induction_analysis.induction_findings(edges, per_example, masking))
    heads_row = rows["claim"] == "AttAttr's top two heads are induction or previous-token heads"
    assert (rows.loc[~heads_row, "verdict"] == "holds").all(), rows[["claim", "low", "high"]]
    assert rows.loc[heads_row, "verdict"].item() == "not testable"
    assert rows.loc[heads_row, "reason"].item().endswith("gives 1: no interval")
    assert (rows["n"] == n).all() and rows["low"].notna().all() and rows["source"].all()
    assert rows.loc[1, "value"] == pytest.approx(0.5)  # AttAttr 1.0 - attention 0.5
    heads = induction_analysis.head_table(per_example, n_heads=2)
    assert list(heads.sort_values("attattr_rank")[["layer", "head"]].itertuples(
        index=False, name=None))[:2] == [(0, 0), (1, 0)]
    # a model of more than PAIR_MASKING_HEADS heads (SmolLM2's 270) is not masked pair by pair
    unmasked = pd.DataFrame(induction_analysis.induction_findings(edges, per_example, None))
    columns = ["claim", "value", "low", "high", "verdict"]
    pd.testing.assert_frame_equal(unmasked.iloc[:-1][columns], rows.iloc[:-1][columns])
    assert unmasked.iloc[-1]["verdict"] == "not testable"
    assert "rule induction_heads" in unmasked.iloc[-1]["reason"]


def test_the_previous_token_step_is_sought_below_the_induction_edge_s_layer():
    """Three layers, one head, five tokens, the query at 4, B at 2, A at 1. Example 0: the
    induction edge (4, 2) is strongest in layer 2 and the step B <- A is AttAttr's strongest
    edge in layer 1 (a weaker distractor in layer 0, raw attention's strongest edge below):
    found, by AttAttr and its tree, not by attention. Example 1: the query's edge to B is
    strongest in layer 0, which leaves no layer below for the step, however strong."""
    attr = np.zeros((2, 3, 1, 5, 5))
    attr[0, 2, 0, 4, 2], attr[0, 1, 0, 2, 1], attr[0, 0, 0, 3, 0] = 1.0, 0.8, 0.5
    attr[1, 0, 0, 4, 2], attr[1, 1, 0, 4, 2], attr[1, 0, 0, 2, 1] = 1.0, 0.5, 0.9
    attention = np.full((2, 3, 1, 5, 5), 0.1)
    attention[:, 0, 0, 3, 0] = 0.9
    edges = induction_analysis.edge_table(attr, attention, np.array([4, 4]), np.array([2, 2]),
                                          np.array([1, 1]))
    assert edges["induction_layer"].tolist() == [2, 0]
    assert edges["path_attattr"].tolist() == [True, False]
    assert edges["path_attention"].tolist() == [False, False]
    assert edges["tree_path"].tolist() == [True, False]


def test_the_top_two_heads_share_counts_the_mechanism_heads_among_them():
    # the second head by attribution is neither kind: half of the top two
    per_head = np.array([[1.0, 0.1, 0.9], [0.9, 0.1, 0.1], [0.8, 0.9, 0.1]])
    sample = np.repeat(per_head.T[None, None], 3, axis=1)
    assert induction_analysis.mechanism_share(sample) == pytest.approx([0.5])


def _run_stages(config: dict, checkpoint, out_dir) -> dict:
    """Rules prepare_data, finetune, attribute (one shard), summarise_attributions, trees and
    induction of the configuration's one task, run as their jobs (after the dry run's
    checks); returns the output paths by file name."""
    import dataclasses

    from attnlab.model_job import ModelJob
    from attnlab.plumbing.config import validate_config
    from attnlab.plumbing.preflight import check_config
    from attnlab.stages import attribute, finetune, prepare_data, summarise_attributions, trees
    from attnlab.stages import induction as induction_stage

    check_config(validate_config(config), str(checkpoint))
    out = {name: out_dir / name for name in (
        "train.parquet", "dev.parquet", "summary.json", "model", "metrics.json",
        "part.parquet", "shard.json", "attribution.json", "recovery.parquet",
        "tree_edges.parquet", "trees.parquet", "tree_claims.parquet", "trees.json",
        "sizes.png", "figures", "edges.parquet", "heads.parquet", "claims.parquet",
        "induction.json")}
    parts = [str(out["part.parquet"])]
    jobs = [
        # the checkpoint's tokenizer checks the prompts' lengths
        (prepare_data, {"pretrained": str(checkpoint)},
         {"train": out["train.parquet"], "dev": out["dev.parquet"],
          "summary": out["summary.json"]}),
        (finetune, {"train": out["train.parquet"], "dev": out["dev.parquet"],
                    "pretrained": str(checkpoint), "start": []},
         {"model": out["model"], "metrics": out["metrics.json"]}),
        (attribute, {"model": out["model"], "dev": out["dev.parquet"]},
         {"part": out["part.parquet"], "summary": out["shard.json"]}),
        (summarise_attributions, {"parts": parts, "finetune_metrics": out["metrics.json"]},
         {"summary": out["attribution.json"], "claims": out["recovery.parquet"]}),
        (trees, {"parts": parts, "finetune_metrics": out["metrics.json"]},
         {"edges": out["tree_edges.parquet"], "trees": out["trees.parquet"],
          "claims": out["tree_claims.parquet"], "summary": out["trees.json"],
          "sizes": out["sizes.png"], "figures": out["figures"]}),
        (induction_stage, {"parts": parts, "model": out["model"], "dev": out["dev.parquet"],
                           "finetune_metrics": out["metrics.json"]},
         {"edges": out["edges.parquet"], "heads": out["heads.parquet"],
          "claims": out["claims.parquet"], "summary": out["induction.json"]}),
    ]
    for stage, inputs, outputs in jobs:
        job = ModelJob.from_config(
            stage.__name__.rsplit(".", 1)[1], config, task=next(iter(config["tasks"])),
            inputs={k: str(v) if not isinstance(v, list) else v for k, v in inputs.items()},
            outputs={k: str(v) for k, v in outputs.items()})
        stage.run(dataclasses.replace(job, wildcards={**job.wildcards, "shard": "0"}))
    return out


def test_your_own_decoder_and_prompt_file_go_through_the_same_stages(induction_model, tmp_path):
    """A checkpoint saved by save_pretrained and a CSV of prompts with their own column names,
    as config/induction.yaml's comment says to point it at them: rules prepare_data, finetune
    (a `finetuned` model is evaluated, not trained) and induction, run as their jobs."""
    import yaml

    checkpoint = tmp_path / "my-decoder"
    induction_model.save(checkpoint)
    rows = induction.generate(40, seed=9).rename(columns={"text": "prompt", "target": "next"})
    for split in ("train", "dev"):
        rows.to_csv(tmp_path / f"{split}.csv", index=False)
    config = yaml.safe_load(open("config/induction.yaml"))
    config["tasks"] = {"mine": {
        "kind": "next_token", "source": "local", "text_fields": ["prompt"],
        "target_field": "next",
        "local": {"train": str(tmp_path / "train.csv"), "dev": str(tmp_path / "dev.csv")}}}
    config["model"] = {"source": "finetuned", "pretrained": str(checkpoint), "max_length": 32}
    config["device"] = "cpu"
    config["induction"]["examples"] = 40
    out = _run_stages(config, checkpoint, tmp_path / "out")
    metrics = json.loads(out["metrics.json"].read_text())
    # the trained model, evaluated as published on sequences it never saw
    assert metrics["steps"] == 0 and metrics["dev_accuracy"] >= 0.9, metrics
    claims = pd.read_parquet(out["claims.parquet"])
    assert claims.loc[0, "value"] >= 0.9, claims.to_string()  # AttAttr finds B
    # the dump: one row per prompt, attributed at its last token for its target token
    dump = pd.read_parquet(out["part.parquet"])
    tokenizer = induction_model.tokenizer
    targets = tokenizer.convert_tokens_to_ids(rows["next"].tolist())
    assert dump["label"].tolist() == targets and dump["target"].tolist() == targets
    assert dump["probs"].isna().all()  # a decoder's vocabulary-wide distribution is not kept
    # the tokenizer puts <s> first: a token more than the prompt's words
    assert (dump["n_tokens"] == rows["prompt"].str.split().str.len() + 1).all()
    # the planted pair: the last token (the second A) reading B's first position
    assert dump["planted_i"].tolist() == (dump["n_tokens"] - 1).tolist()
    assert dump["planted_j"].tolist() == (rows["gt_induction"] + 1).tolist()
    shard = json.loads(out["shard.json"].read_text())
    assert shard["accuracy"] >= 0.9 and shard["outside_tolerance"] == 0, shard
    # the strongest attribution edge joins the pair in every example (observed 1.0; 0.9 for
    # another CPU), raw attention's in 0.4 (its strongest edges are layer 0's)
    recovery = pd.read_parquet(out["recovery.parquet"])
    assert recovery.loc[0, "value"] >= 0.9 and recovery.loc[2, "verdict"] == "holds"
    # the trees are rooted at the last token: B is its top node, joined to it by a root edge
    tree_table = pd.read_parquet(out["trees.parquet"])
    assert (tree_table["top_node"] == rows["gt_induction"] + 1).mean() >= 0.9
    tree_claims = pd.read_parquet(out["tree_claims.parquet"])
    assert tree_claims.loc[0, "value"] >= 0.9, tree_claims.to_string()
    tree_edges = pd.read_parquet(out["tree_edges.parquet"])
    root = tree_edges[tree_edges["kind"] == "root"].merge(
        dump[["idx", "n_tokens"]], left_on="example", right_on="idx")
    assert (root["from"] == root["n_tokens"] - 1).all()


def test_a_gpt2_checkpoint_is_trained_further_and_analysed(tmp_path):
    """A GPT-2 saved by save_pretrained (untrained, tiny) with model.source: pretrained: one
    epoch of next-token training from it, then the induction analysis, through the jobs."""
    import yaml
    from transformers import AutoTokenizer, GPT2Config, GPT2LMHeadModel

    from attnlab.data.tokenization import build_causal_tokenizer

    checkpoint = tmp_path / "gpt2"
    tokenizer = build_causal_tokenizer(induction.words())
    torch.manual_seed(0)
    GPT2LMHeadModel(GPT2Config(vocab_size=len(tokenizer), n_positions=32, n_embd=16, n_layer=2,
                               n_head=2)).save_pretrained(checkpoint)
    tokenizer.save_pretrained(checkpoint)
    config = yaml.safe_load(open("config/induction.yaml"))
    config["tasks"]["induction"]["synthetic"].update(n_train=128, n_dev=30)
    config["model"] = {"source": "pretrained", "pretrained": str(checkpoint), "max_length": 32}
    config["finetune"]["epochs"] = 1
    config["device"] = "cpu"
    config["induction"]["examples"] = 30
    out = _run_stages(config, checkpoint, tmp_path / "out")
    metrics = json.loads(out["metrics.json"].read_text())
    assert metrics["steps"] == 2, metrics
    # trained further: the saved model is not the checkpoint
    saved = GPT2LMHeadModel.from_pretrained(out["model"]).eval()
    before = GPT2LMHeadModel.from_pretrained(checkpoint)
    assert not torch.equal(saved.transformer.wte.weight, before.transformer.wte.weight)
    # its dev accuracy is the share of dev prompts whose argmax next word is the target, as
    # plain transformers computes it one unpadded prompt at a time (within one prompt of the 30:
    # a near-tie of an untrained model's logits may fall the other way in a padded batch)
    dev = pd.read_parquet(out["dev.parquet"])
    tokenizer = AutoTokenizer.from_pretrained(out["model"])
    with torch.no_grad():
        right = [int(saved(**tokenizer(text, return_tensors="pt")).logits[0, -1].argmax())
                 == tokenizer.convert_tokens_to_ids(target)
                 for text, target in zip(dev["text"], dev["target"], strict=True)]
    assert len(right) == 30
    assert abs(metrics["dev_accuracy"] - sum(right) / 30) <= 1 / 30 + 1e-9, (metrics, right)
    # the analysis runs whatever the model learned: every claim has its estimate and interval;
    # it is judged on a model that learned the task and, on one that did not (one epoch of a
    # random GPT-2 may not), not testable with the reason (claims.on_models); the heads
    # table has one row per head of the 2 x 2
    claims = pd.read_parquet(out["claims.parquet"])
    assert len(claims) == 8 and claims[["value", "low", "high"]].notna().all().all()
    why = unlearned(metrics)
    if why is None:
        judged = claims[claims["reason"] != NO_WIDTH_ONE]  # as in the test above
        assert judged["verdict"].isin(["holds", "does not hold", "inconclusive"]).all()
        assert (claims.loc[claims["reason"] == NO_WIDTH_ONE, "claim"] == MECHANISM_CLAIM).all()
    else:
        assert (claims["verdict"] == "not testable").all()
        assert (claims["reason"] == why.reason).all()
    assert len(pd.read_parquet(out["heads.parquet"])) == 4
