"""Attribution trees (Algorithm 1): known trees of hand-made matrices, the same tree from a full
matrix and from a dump row, empty trees, the settings a run refuses, and trees over words where
a real WordPiece tokenizer splits them into pieces (and the same trees as before where it does
not)."""

from __future__ import annotations

import copy

import numpy as np
import pandas as pd
import pytest
import torch
from test_config import default_config, dry_run
from test_dumps import CFG, MODEL_CFG, SHARD_CFG, dense_edges, random_result, tiny_task_model

from attnlab.analyses import trees
from attnlab.data import words
from attnlab.data.dumps import PAIR_COLUMNS, dump_frame, word_level, word_row, write_dump
from attnlab.data.tasks import TaskSpec, load_split
from attnlab.engine import dump_rows
from attnlab.engine.attribution import Attribution
from attnlab.engine.dump_rows import example_row, text_columns
from attnlab.engine.models import load_classifier
from attnlab.job import Job
from attnlab.report.figures import save_figure
from attnlab.report.flow_figures import plot_tree, plot_tree_sizes
from attnlab.stages import trees as trees_stage

TAU = 0.5


def hand_made() -> np.ndarray:
    """Three layers over [CLS] a b c d [SEP] (positions 0..5); dyadic values, so every sum and
    ratio below is exact."""
    a = np.zeros((3, 6, 6))
    # layer 2, the last: only the row totals (the top node) use it
    a[2, 0, 1] = 8.0  # [CLS] has the largest total but is never the top node
    a[2, 1, 5] = 0.25
    a[2, 3, 5] = 2.5  # c's total ties a's (2.5): the first position, a, wins
    a[2, 2, 2] = 100.0  # a self-interaction counts neither in totals nor as an edge
    # layer 1
    a[1, 1, 2] = 1.0  # a -> b: a Appears, so it becomes Fixed and b Appears
    a[1, 1, 3] = 0.5  # exactly tau x max: not above it, so not kept
    a[1, 2, 4] = 0.75  # b -> d in the same layer, scanned after a -> b: b is Appear by then
    # layer 0
    a[0, 0, 3] = 0.875  # [CLS] is not in the tree: ignored
    a[0, 1, 3] = 0.75  # a is Fixed and c NotAppear: added
    a[0, 2, 1] = 1.0  # a is in the tree already: a token gets one parent only
    a[0, 4, 3] = 0.625  # c Appeared one edge earlier in this layer: not added again
    a[0, 4, 5] = 0.25  # below tau
    return a


def test_hand_made_matrices_give_the_known_tree():
    tree = trees.tree_from_matrix(hand_made(), TAU, "layer")
    assert tree.top == 1
    assert tree.edges == [(1, 1, 2, 1.0), (1, 2, 4, 0.75), (0, 1, 3, 0.75)]
    assert tree.nodes == [1, 2, 4, 3]
    assert tree.root_edges() == [(0, 1), (0, 2), (0, 4), (0, 3)]
    assert tree.joins(3, 1) and not tree.joins(1, 4)


def test_a_decoders_tree_is_rooted_at_its_last_token_and_joins_its_pair_by_a_root_edge():
    # the hand-made matrices as a decoder's 6 tokens: the root is position 5 (the query),
    # which is out of the top node's race as [CLS] is for a classifier
    a = hand_made()
    a[:, 0, :] = 0.0  # a decoder's first token reads only itself
    tree = trees.tree_from_matrix(a, TAU, "layer", root=5)
    assert tree.root == 5 and tree.top == 1
    assert tree.edges == [(1, 1, 2, 1.0), (1, 2, 4, 0.75), (0, 1, 3, 0.75)]
    assert tree.root_edges() == [(5, 1), (5, 2), (5, 4), (5, 3)]
    # the induction task's planted pair is the query reading a key: a root edge joins it
    assert tree.joins(5, 2) and tree.joins(2, 5) and not tree.joins(5, 0)
    row = {"n_tokens": 6}
    assert trees.root_of(row, causal=True) == 5 and trees.root_of(row, causal=False) == 0


def test_top_node_ties_go_to_the_first_position_and_skip_cls():
    assert trees.top_node(np.array([9.0, 1.0, 3.0, 3.0])) == 2
    a = hand_made()
    a[2, 3, 5] = 2.625  # c's total now beats a's: c is the top node and reads nothing
    tree = trees.tree_from_matrix(a, TAU, "layer")
    assert tree.top == 3 and tree.edges == [] and tree.nodes == [3]


def test_a_decoders_root_is_its_last_token_and_is_skipped_instead_of_the_first():
    # a decoder's prediction reads the last position: it is the root, position 0 may be the top
    assert trees.top_node(np.array([9.0, 1.0, 3.0, 3.0]), root=3) == 0
    assert trees.top_node(np.array([1.0, 2.0, 5.0]), root=2) == 1
    layers = np.zeros((2, 3, 3))
    layers[0, 1, 0] = 1.0  # layer 0: position 1 reads position 0
    layers[1, 2, 1] = 4.0  # last layer: the root reads position 1, the largest total
    assert trees.tree_from_matrix(layers, TAU, "layer").top == 2  # [CLS] root: 2 is the top
    tree = trees.tree_from_matrix(layers, TAU, "layer", root=2)
    assert tree.top == 1 and tree.edges == [(0, 1, 0, 1.0)] and tree.nodes == [1, 0]


def test_normalisation_by_the_layer_or_the_rows_other_than_cls():
    """[CLS]'s own row holds layer 0's maximum (4): divided by it the edge b -> a (1.0) is below
    tau; divided by the maximum over the other rows (the official code) it is the maximum."""
    a = np.zeros((2, 4, 4))
    a[1, 2, 3] = 1.0  # b is the top node
    a[0, 0, 1] = 4.0
    a[0, 2, 1] = 1.0
    assert trees.tree_from_matrix(a, TAU, "layer").edges == []
    assert trees.tree_from_matrix(a, TAU, "no_cls").edges == [(0, 2, 1, 1.0)]


def test_a_self_interaction_is_never_an_edge_but_sets_the_layer_maximum():
    a = np.zeros((2, 4, 4))
    a[1, 2, 3] = 1.0
    a[0, 2, 2] = 3.0  # the layer's maximum is on the diagonal
    a[0, 2, 1] = 2.0  # 2/3 of it: kept
    a[0, 2, 3] = 1.0  # 1/3 of it: not kept
    tree = trees.tree_from_matrix(a, TAU, "layer")
    assert tree.edges == [(0, 2, 1, pytest.approx(2 / 3))]


def test_no_edge_above_tau_gives_an_empty_tree_not_an_error():
    negative = -np.abs(hand_made()) - 0.1  # no positive maximum anywhere
    tree = trees.tree_from_matrix(negative, TAU, "layer")
    assert tree.edges == [] and tree.nodes == [tree.top]


def _rows(tau_floor: float, seeds=range(6)):
    cfg = {**CFG, "keep_full": True, "edge_min_fraction": tau_floor}
    for seed in seeds:
        result = random_result(n_examples=2, layers=4, heads=3, width=9, real=(9, 7), seed=seed)
        result.attr = result.attr + 0.8 * result.attr.abs()  # mostly positive, like real ones
        for b in range(2):
            row = example_row(result, b, cfg)
            row["idx"] = 2 * seed + b
            n = row["n_tokens"]
            full = torch.tensor(row["attr_full"]).view(4, 3, n, n).sum(dim=1)  # as the dump sums
            yield row, full.double().numpy()


@pytest.mark.parametrize("normalise", ["layer", "no_cls"])
@pytest.mark.parametrize("tau", [0.1, 0.25, 0.4, 0.7])
def test_tree_from_the_dump_equals_tree_from_the_full_matrix(tau, normalise):
    """The dump keeps every edge above 0.1 of min(layer max, max without [CLS]), which covers
    every tau >= 0.1 under both normalisations; scores agree to float32 rounding."""
    sizes = []
    for row, full in _rows(0.1):
        from_dump = trees.tree_from_dump(row, 4, tau, normalise)
        from_matrix = trees.tree_from_matrix(full, tau, normalise)
        assert from_dump.top == from_matrix.top and from_dump.nodes == from_matrix.nodes
        assert [e[:3] for e in from_dump.edges] == [e[:3] for e in from_matrix.edges]
        np.testing.assert_allclose([e[3] for e in from_dump.edges],
                                   [e[3] for e in from_matrix.edges], rtol=1e-6)
        sizes.append(len(from_dump.edges))
    assert max(sizes) >= 2  # the comparison covers real trees, not only empty ones


def test_layers_cut_by_the_edge_cap_are_named():
    """Edges kept down to the cap only: layers 0 and 1 (the ones the tree scans) lack edges
    above tau = 0.1, which the trees table flags; a tau above the cut needs nothing more."""
    cfg = {**CFG, "max_edges_per_layer": 2}
    result = random_result(n_examples=1, layers=3, heads=2, width=8, real=(8,), seed=1)
    result.attr = result.attr.abs()
    row = {**example_row(result, 0, cfg), "idx": 7}
    assert trees.incomplete_layers(row, 3, 0.1, "layer") == [0, 1]
    assert trees.incomplete_layers(row, 3, 0.99, "layer") == []
    row.update(label=0, pred=0, tokens=["w"] * 8, planted_i=None, planted_j=None)
    _, table = trees.tree_tables(pd.DataFrame([row]), 3, 0.1, "layer")
    assert table["incomplete_layers"].tolist() == [2]
    assert trees.size_summary(table)["incomplete_trees"] == 1


def test_tree_table_keeps_a_row_for_an_empty_tree():
    result = random_result(n_examples=2, layers=3, heads=2, width=6, real=(6, 5), seed=3)
    result.attr[1] = -result.attr[1].abs() - 0.1  # example 1: no positive attribution at all
    rows = []
    for b in range(2):
        row = example_row(result, b, CFG)
        row.update(idx=10 + b, label=0, pred=0, tokens=[f"w{k}" for k in range(row["n_tokens"])],
                   planted_i=1, planted_j=2)
        rows.append(row)
    edges, table = trees.tree_tables(pd.DataFrame(rows), 3, 0.4, "layer")
    empty = table.set_index("example").loc[11]
    assert empty["edges"] == 0 and empty["nodes"] == 1 and not empty["joins_planted"]
    assert set(edges.loc[edges["example"] == 11, "kind"]) == {"root"}  # [CLS] -> top node only
    summary = trees.size_summary(table)
    assert summary["examples"] == 2 and summary["empty_trees"] >= 1


def test_unknown_example_to_render_fails_before_anything_is_written(tmp_path):
    result = random_result(n_examples=1, layers=2, heads=2, width=5, real=(5,))
    row = {**example_row(result, 0, CFG), "idx": 0, "label": 0, "tokens": ["w"] * 5,
           "segments": [0] * 5, "planted_i": None, "planted_j": None}
    write_dump([row], tmp_path / "part.parquet", {"shard": 0, "n_shards": 1, "n_layers": 2,
                                                  "n_heads": 2})
    out = {name: tmp_path / "out" / name for name in
           ("edges", "trees", "claims", "summary", "sizes", "figures")}
    job = Job(rule="trees", inputs={"parts": [tmp_path / "part.parquet"]}, outputs=out,
              settings={"task": {"text_fields": ["sentence"], "label_names": ["neg", "pos"]},
                        "trees": {"tau": 0.4, "normalise": "layer", "examples": 1,
                                  "example_idx": [999]},
                        "seed": 0},
              wildcards={"task": "t"})
    with pytest.raises(ValueError, match=r"trees.example_idx: \[999\] are not attributed dev"):
        trees_stage.run(job)
    assert not (tmp_path / "out").exists()


def test_the_hand_made_tree_is_two_interactions_deep():
    # a -> b -> d (layer 1, then the same layer) and a -> c: the chain a, b, d is the deepest
    assert trees.tree_from_matrix(hand_made(), TAU, "layer").depth() == 2
    assert trees.Tree(top=None).depth() == 0
    assert trees.Tree(top=3, nodes=[3]).depth() == 0


def test_the_control_relabels_each_layers_keys_and_keeps_queries_scores_and_the_root():
    row = {"idx": 4, "n_tokens": 6, "edge_layer": [0, 0, 1, 1, 1], "edge_i": [1, 2, 3, 0, 4],
           "edge_j": [2, 3, 1, 5, 5], "edge_score": [1.0, 0.5, 0.9, 0.8, 0.7]}
    shuffled = trees.shuffled_row(row, causal=False, seed=0)
    assert shuffled["edge_i"] == row["edge_i"] and shuffled["edge_score"] == row["edge_score"]
    keys = np.array(shuffled["edge_j"])
    assert 0 not in keys  # no key becomes the root [CLS]
    # a permutation per layer: distinct keys stay distinct, equal ones equal (layer 1: 5, 5)
    assert keys[0] != keys[1] and keys[3] == keys[4] != keys[2]
    assert shuffled == trees.shuffled_row(row, causal=False, seed=0)  # seeded
    draws = {tuple(trees.shuffled_row({**row, "idx": idx}, causal=False, seed=0)["edge_j"])
             for idx in range(20)}
    assert len(draws) > 10  # each example draws its own permutation
    # a decoder's root is its last token, which no key becomes either
    decoder = trees.shuffled_row({**row, "edge_j": [0, 3, 1, 2, 2]}, causal=True, seed=0)
    assert 5 not in decoder["edge_j"]


def planted_table(joins: list[bool | None], control: list[bool | None], correct: list[bool],
                  depth: list[int], control_depth: list[int]) -> pd.DataFrame:
    return pd.DataFrame({
        "correct": correct, "depth": depth, "control_depth": control_depth,
        "joins_planted": pd.array(joins, dtype="boolean"),
        "control_joins_planted": pd.array(control, dtype="boolean")})


def test_tree_findings_count_only_correct_examples_with_ground_truth_against_the_control():
    # 40 correct examples with a planted pair: 38 trees join it (0.95), 4 controls do; one
    # misclassified example (never joined) and one without ground truth are left out
    n = 40
    table = planted_table(
        joins=[True] * 38 + [False] * 2 + [False, None],
        control=[True] * 4 + [False] * 36 + [True, None],
        correct=[True] * n + [False, True],
        depth=[3] * (n + 2), control_depth=[1, 2] * (n // 2 + 1))
    planted, versus, hierarchy = trees.tree_claims(table)
    assert planted["value"] == pytest.approx(0.95) and planted["n"] == n
    assert planted["verdict"] == "holds"  # the interval, about [0.88, 1], clears 0.8
    assert versus["value"] == pytest.approx(34 / 40) and versus["verdict"] == "holds"
    # depth: every example is 1 or 2 deeper than its control, the misclassified ones too
    assert hierarchy["value"] == 1.5 and hierarchy["n"] == n + 2
    assert hierarchy["verdict"] == "holds"
    assert all(row["kind"] == "finding" and row["source"].startswith("Hao et al. 2021")
               for row in (planted, versus, hierarchy))


def test_tree_findings_fail_or_stay_open_where_the_control_does_as_well():
    n = 40
    # the controls join the pair in the same 32 of 40 examples, and are as deep on average
    table = planted_table(joins=[True] * 32 + [False] * 8, control=[True] * 32 + [False] * 8,
                          correct=[True] * n, depth=[2, 1] * 20, control_depth=[1, 2] * 20)
    planted, versus, hierarchy = trees.tree_claims(table)
    assert planted["value"] == pytest.approx(0.8) and planted["verdict"] == "inconclusive"
    assert versus["value"] == 0 and versus["verdict"] == "does not hold"  # below the 0.1 gap
    assert hierarchy["value"] == 0 and hierarchy["verdict"] == "inconclusive"


def test_real_data_has_the_hierarchy_finding_alone():
    table = planted_table(joins=[None] * 3, control=[None] * 3, correct=[True] * 3,
                          depth=[2, 3, 2], control_depth=[0, 1, 1])
    (hierarchy,) = trees.tree_claims(table)
    assert hierarchy["claim"] == "attribution trees are deeper than trees of shuffled attributions"
    assert hierarchy["value"] == pytest.approx(5 / 3)
    assert trees.tree_claims(table.iloc[:0])[0]["verdict"] == "not testable"


def test_sample_is_seeded_and_includes_the_chosen_examples():
    available = list(range(100, 140))
    first = trees.sample_examples(available, 3, [137], seed=0)
    assert first == trees.sample_examples(available, 3, [137], seed=0)
    assert len(first) == 4 and 137 in first and first == sorted(first)
    assert first != trees.sample_examples(available, 3, [137], seed=1)
    with pytest.raises(ValueError, match=r"trees.example_idx: \[5\] are not attributed"):
        trees.sample_examples(available, 3, [5], seed=0)


@pytest.mark.parametrize("tau, expected", [
    (1.0, "config error at trees.tau: 1.0 is out of range (allowed: > 0 and < 1)"),
    (0.0, "config error at trees.tau: 0.0 is out of range (allowed: > 0 and < 1)"),
    (0.05, "config error at trees.tau: 0.05 is below attribution.edge_min_fraction (0.1)"),
])
def test_tau_outside_its_range_fails_the_dry_run(tmp_path, tau, expected):
    config = copy.deepcopy(default_config())
    config["trees"] = {"tau": tau}
    result = dry_run(config, tmp_path)
    assert result.returncode != 0
    assert expected in result.stdout + result.stderr


def test_tree_sizes_figure_is_the_same_for_the_same_trees(tmp_path):
    trees = pd.DataFrame({"n_tokens": [5, 5, 7, 7, 9], "edges": [1, 2, 2, 0, 3],
                          "correct": [True, False, True, True, False]})
    plot_tree_sizes(trees, tmp_path / "a.png")
    plot_tree_sizes(trees, tmp_path / "b.png")
    assert (tmp_path / "a.png").read_bytes() == (tmp_path / "b.png").read_bytes()


# Words split into pieces. SENTENCE's tokens (MiniLM's WordPiece) and words:
#   tokens  0 [CLS]  1 an  2 un  3 ##sen  4 ##time  5 ##ntal  6 ,  7 well  8 -  9 crafted  10 film
#           11 .  12 [SEP]
#   words   0 [CLS]  1 an  2 unsentimental (tokens 2-5)  3 ,  4 well  5 -  6 crafted  7 film  8 .
#           9 [SEP]
SENTENCE = "An unsentimental, well-crafted film."
PIECES = [2, 3, 4, 5]  # the pieces of "unsentimental"


def wordpiece_row(tokenizer, attr: torch.Tensor, cfg=CFG) -> dict:
    """The dump row rule attribute writes for SENTENCE, with attributions `attr` (L, H, 13, 13)
    in place of the engine's."""
    encoding = tokenizer([SENTENCE])
    input_ids = encoding["input_ids"][0]
    n, (layers, heads) = len(input_ids), attr.shape[:2]
    result = Attribution(attr[None], torch.full((1, layers, heads, n, n), 1 / n),
                         torch.tensor([[0.25, 0.75]]), torch.tensor([1]), torch.tensor([0.75]),
                         torch.zeros(1, layers), torch.full((1, layers), 6),
                         torch.zeros(1, layers, dtype=torch.float64))
    text = text_columns(tokenizer, encoding, 0, input_ids)
    return {**example_row(result, 0, cfg, text["word_ids"]), **text, "idx": 0, "label": 1,
            "planted_i": None, "planted_j": None}


def hand_made_pieces() -> torch.Tensor:
    """Three layers, two heads over SENTENCE's tokens; dyadic values, so every sum is exact.
    Over words the top node is "unsentimental", whose four pieces each read little; over
    tokens it would be "film"."""
    a = torch.zeros(3, 2, 13, 13)
    # layer 2: totals only. Each piece of "unsentimental" reads "film" 0.5 (2.0 as a word);
    # "film" reads "crafted" 1.0
    a[2, 0, PIECES, 10] = 0.5
    a[2, 1, 10, 9] = 1.0
    # layer 1: "unsentimental" reads "film" 4 x 0.25, split over the two heads: 1.0, the layer's
    # largest word pair, though no token pair is above 0.25
    a[1, 0, PIECES[:2], 10] = 0.25
    a[1, 1, PIECES[2:], 10] = 0.25
    a[1, 0, 7, 9] = 0.75  # well -> crafted: above tau, but "well" is not in the tree
    # layer 0: "film" reads "crafted" (0.25 in each head), "." below tau; two pieces of
    # "unsentimental" read "," 0.125 each (0.25 as a word: tau x max, not above it); a piece
    # reading another piece of its word is the word's self-interaction, never an edge
    a[0, :, 10, 9] = 0.25
    a[0, 0, 10, 11] = 0.125
    a[0, 0, PIECES[2:], 6] = 0.125
    a[0, 1, 2, 3] = 0.375
    return a


def test_words_split_into_pieces_are_merged_into_one_node_by_summing(wordpiece_tokenizer):
    attr = hand_made_pieces()
    row = wordpiece_row(wordpiece_tokenizer, attr)
    assert row["tokens"][2:6] == ["un", "##sen", "##time", "##ntal"]  # the tokenizer splits it
    assert row["word_ids"] == [0, 1, 2, 2, 2, 2, 3, 4, 5, 6, 7, 8, 9]
    assert row["words"] == ["[CLS]", "an", "unsentimental", ",", "well", "-", "crafted", "film",
                            ".", "[SEP]"]
    # a word pair's score is the sum over its pieces' pairs, in every stored column
    merged = words.merge_pairs(attr.sum(dim=1).numpy(), row["word_ids"])
    assert merged[1, 2, 7] == 1.0 and merged[0, 2, 3] == 0.25 and merged[0, 2, 2] == 0.375
    assert merged.sum() == pytest.approx(float(attr.sum()))  # completeness's total is kept
    shown = word_row(pd.Series(row))
    assert shown["n_tokens"] == 10 and shown["tokens"] == row["words"]
    assert dense_edges(shown, 1) == {(2, 7): 1.0, (4, 6): 0.75}
    assert shown["row_sum"][20:30] == pytest.approx(merged[2].sum(1) - merged[2].diagonal())
    # the tree over words, from the dump row and from the merged matrices alike
    tree = trees.tree_from_dump(shown, 3, TAU, "layer")
    assert tree.top == 2 and tree.edges == [(1, 2, 7, 1.0), (0, 7, 6, 1.0)]
    assert tree.nodes == [2, 7, 6]
    from_matrix = trees.tree_from_matrix(merged, TAU, "layer")
    assert (from_matrix.top, from_matrix.edges) == (tree.top, tree.edges)
    # over tokens, the strongest single piece would not make "unsentimental" the top node
    assert trees.tree_from_matrix(attr.sum(dim=1).numpy(), TAU, "layer").top == 10


def test_tree_tables_label_nodes_with_whole_words(wordpiece_tokenizer):
    dump = word_level(dump_frame([{**wordpiece_row(wordpiece_tokenizer, hand_made_pieces()),
                                   "pred": 1}]))
    edges, table = trees.tree_tables(dump, 3, TAU, "layer")
    flow = edges[edges["kind"] == "flow"]
    assert list(zip(flow["from_token"], flow["to_token"], strict=True)) == [
        ("unsentimental", "film"), ("film", "crafted")]
    assert table.loc[0, "top_token"] == "unsentimental" and table.loc[0, "n_tokens"] == 10
    assert not any("##" in str(label) for label in edges[["from_token", "to_token"]].stack())


def test_the_tree_figure_reads_words(wordpiece_tokenizer, tmp_path):
    row = word_row(pd.Series({**wordpiece_row(wordpiece_tokenizer, hand_made_pieces()),
                              "pred": 1}))
    tree = trees.tree_from_dump(row, 3, TAU, "layer")
    plot_tree(row, tree, 3, ["negative", "positive"], TAU, None, tmp_path / "tree.png")
    assert (tmp_path / "tree.png").stat().st_size > 0


def test_merging_is_the_identity_on_the_synthetic_word_level_tokenizer(pair_task, tmp_path):
    """Every synthetic word is one token: the tiny model's dump rows keep no word columns, so
    the trees, views and triggers read the dump as it was; and merging each token as a word of
    its own gives the token columns exactly."""
    task, model_dir, dev = tiny_task_model(tmp_path, pair_task)
    spec = TaskSpec.from_config("syn_mnli", task)
    model, tokenizer = load_classifier(model_dir)
    attributed = dump_rows.dump_rows(model, tokenizer, load_split(dev, spec), spec, SHARD_CFG,
                                     MODEL_CFG)
    dump = dump_frame(attributed.rows)
    assert dump["word_ids"].isna().all() and dump["words"].isna().all()
    assert word_level(dump) is dump
    assert all(word_row(row) is row for _, row in dump.iterrows())
    result = random_result(n_examples=1, layers=3, heads=2, width=7, real=(7,), seed=2)
    by_token = example_row(result, 0, CFG)
    by_word = example_row(result, 0, CFG, word_ids=list(range(7)))
    for name in PAIR_COLUMNS:
        assert by_word[f"word_{name}"] == by_token[name], name


def test_the_tree_figure_draws_every_edge_at_the_layer_of_the_edges_table(tmp_path, monkeypatch):
    """The figure and edges.parquet agree on each flow edge's layer: its arrow ends at its key
    on the row of that layer and is labelled with it (the old figure left the layer to be read
    off the two rows an arrow spans, its query's and its key's)."""
    drawn = {}

    def keep(figure, path):
        drawn[path.name] = figure
        save_figure(figure, path)

    monkeypatch.setattr("attnlab.report.flow_figures.save_figure", keep)
    rows = pd.DataFrame([{**row, "tokens": [f"w{p}" for p in range(row["n_tokens"])],
                          "label": 0, "pred": 0, "planted_i": None, "planted_j": None}
                         for row, _ in _rows(0.1)])
    edges, table = trees.tree_tables(rows, 4, 0.25, "layer")
    flow = edges[edges["kind"] == "flow"]
    assert len(flow) >= 4  # the check covers several edges of several layers
    assert flow["layer"].nunique() >= 2
    for _, row in rows.iterrows():
        tree = trees.tree_from_dump(row, 4, 0.25, "layer")
        plot_tree(row, tree, 4, ["a", "b", "c"], 0.25, None, tmp_path / f"tree_{row['idx']}.png")
        ax = drawn[f"tree_{row['idx']}.png"].axes[0]
        labels = {text.get_gid(): text for text in ax.texts if text.get_gid()}
        arrows = [text.xy for text in ax.texts if text.arrow_patch is not None]
        for _, edge in flow[flow["example"] == row["idx"]].iterrows():
            layer, key = edge["layer"], edge["to"]
            label = labels[f"edge-layer {layer} {edge['from']} {key}"]
            assert label.get_text() == str(layer) and label.xy == (key, layer)
            assert (key, layer) in arrows
        # the y axis names the rows by the layer that reads them
        assert [t.get_text() for t in ax.get_yticklabels()] == [
            "read in layer 0", "read in layer 1", "read in layer 2", "read in layer 3",
            "root"]
