"""The figures a reader sees: the mechanical checks every saved figure goes through, and each
figure drawn from small synthetic inputs, checked for what can be checked mechanically (the
layer drawn is the layer named, the size within bounds, no flat panel without a note, no check
warning)."""

from __future__ import annotations

import logging

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest
import seaborn as sns
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.collections import LineCollection
from matplotlib.colors import to_rgb
from PIL import Image

from attnlab.analyses.claims import NotTestable, claim
from attnlab.analyses.interaction_eval import ALL, MEASURES, RANDOM
from attnlab.analyses.pruning_labels import LEAK
from attnlab.report import (
    explanation_figures,
    figures,
    flow_figures,
    head_figures,
    identifiability_figures,
    interaction_figures,
    quadrature_figures,
    trigger_figures,
)

CHECKS = "attnlab.report.figures"


@pytest.fixture
def drawn(monkeypatch, caplog):
    """Every figure a plotting function saves, by file name (kept open after saving), and the
    warnings of the figure checks (`drawn.warnings`)."""
    kept: dict[str, plt.Figure] = {}

    def keep(figure, path):
        kept[path.name] = figure
        figures.save_figure(figure, path)

    for module in (explanation_figures, flow_figures, head_figures, identifiability_figures,
                   interaction_figures, quadrature_figures, trigger_figures):
        monkeypatch.setattr(module, "save_figure", keep)
    caplog.set_level(logging.WARNING, logger=CHECKS)

    class Drawn(dict):
        @property
        def warnings(self) -> list[str]:
            return [r.getMessage() for r in caplog.records if r.name == CHECKS]

    result = Drawn()
    yield result, kept
    plt.close("all")


def figure_of(drawn, name):
    return drawn[1][name]


def within_bounds(path) -> bool:
    width, height = Image.open(path).size
    return width <= figures.MAX_WIDTH_PX and height <= figures.MAX_HEIGHT_PX


# --- the checks themselves --------------------------------------------------------------------

def test_a_flat_panel_warns_unless_a_note_says_why(caplog):
    caplog.set_level(logging.WARNING, logger=CHECKS)
    figure, axes = plt.subplots(1, 2, figsize=(6, 3))
    axes[0].plot([0, 1, 2], [1.0, 1.0, 1.0])
    axes[0].set_title("flat")
    axes[1].plot([0, 1, 2], [1.0, 1.0, 1.0])
    axes[1].axhline(0.5)  # a reference line is no data: the panel is still flat
    figures.note(axes[1], "constant: every token keeps its input")
    problems = figures.check_figure(figure, "task/flat.png")
    assert problems == ["panel 0 ('flat') is flat (every value 1) and has no note saying why"]
    assert caplog.records[0].name == CHECKS
    assert caplog.records[0].getMessage() == f"figure task/flat.png: {problems[0]}"
    plt.close(figure)


def test_a_constant_heatmap_needs_its_values_written_in_its_cells():
    figure, axes = plt.subplots(1, 2, figsize=(6, 3))
    sns.heatmap(np.zeros((2, 3)), annot=True, ax=axes[0], cbar=False)  # "0" in every cell
    sns.heatmap(np.zeros((2, 3)), ax=axes[1], cbar=False)
    assert figures.check_figure(figure, "x.png") == [
        "panel 1 is flat (every value 0) and has no note saying why"]
    plt.close(figure)


def test_an_empty_panel_overlapping_ticks_and_a_legend_over_the_data_warn():
    figure, axes = plt.subplots(1, 3, figsize=(9, 3))
    axes[0].set_title("nothing")
    axes[1].plot(range(20), range(20))
    axes[1].set_xticks(range(20), [f"label{k}" for k in range(20)])
    axes[2].plot([0, 1, 2], [0, 1, 2], label="a legend label long enough to cover the middle")
    axes[2].legend(loc="center")
    problems = figures.check_figure(figure, "x.png")
    assert problems[0] == "panel 0 ('nothing') is empty and has no note saying why"
    assert problems[1].startswith("panel 1: x tick labels 'label0' and 'label1' overlap")
    assert problems[2] == "panel 2: the legend covers 1 data point"
    assert len(problems) == 3
    plt.close(figure)


def test_a_figure_too_large_to_view_warns_and_a_legend_outside_does_not():
    figure, ax = plt.subplots(figsize=(20, 3))
    ax.plot([0, 1, 2], [0, 1, 2], label="line")
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0))
    problems = figures.check_figure(figure, "wide.png")
    # 20 inches at 120 dpi, less the tight box's trim: far above 1,800 pixels
    assert len(problems) == 1 and problems[0].endswith(
        f"pixels, more than {figures.MAX_WIDTH_PX} x {figures.MAX_HEIGHT_PX}")
    plt.close(figure)


# --- each figure -----------------------------------------------------------------------------

def views_row(n: int = 6) -> pd.Series:
    return pd.Series({"idx": 5, "label": 0, "pred": 1,
                      "tokens": ["[CLS]", "a1", "w3", "b1", "w7", "[SEP]"][:n]})


def test_heatmaps_draw_the_named_layer_and_head_in_colours_of_their_own(tmp_path, drawn):
    rng = np.random.default_rng(0)
    attention = rng.dirichlet(np.ones(6), size=(3, 2, 6))  # (L, H, n, n)
    attribution = rng.normal(size=(3, 2, 6, 6))
    attribution[1, 1, 2, 3] = 10.0  # layer 1's largest entry: head 1 is drawn
    flow_figures.plot_heatmaps(views_row(), attention, attribution, 1, ["neg", "pos"], (1, 3),
                               tmp_path / "heatmap_5.png")
    figure = figure_of(drawn, "heatmap_5.png")
    panels = [ax for ax in figure.axes if ax.images]
    expected = [attention[1, 1], attribution[1, 1], attention[1].mean(axis=0),
                attribution[1].sum(axis=0)]
    for ax, matrix in zip(panels, expected, strict=True):
        np.testing.assert_array_equal(ax.images[0].get_array(), matrix)  # the layer named
        assert ax.get_title().startswith(("attention, layer 1", "attribution, layer 1"))
    assert panels[0].get_title().endswith("head 1")
    # attention and attribution in different maps; the planted pair in a colour of neither
    maps = [ax.images[0].get_cmap().name for ax in panels]
    assert maps == ["Greys", "RdBu_r", "Greys", "RdBu_r"]
    planted = [label for label in panels[0].get_xticklabels() if label.get_text() in ("a1", "b1")]
    assert [label.get_color() for label in planted] == ["tab:green", "tab:green"]
    assert drawn[0].warnings == [] and within_bounds(tmp_path / "heatmap_5.png")


def test_heatmaps_of_a_long_example_stay_within_bounds(tmp_path, drawn):
    n = 64  # model.max_length of the default run
    rng = np.random.default_rng(1)
    row = pd.Series({"idx": 1, "label": 0, "pred": 0, "tokens": [f"w{k}" for k in range(n)]})
    flow_figures.plot_heatmaps(row, rng.dirichlet(np.ones(n), size=(2, 2, n)),
                               rng.normal(size=(2, 2, n, n)), 0, ["a", "b"], None,
                               tmp_path / "heatmap_1.png")
    assert within_bounds(tmp_path / "heatmap_1.png")
    assert not [w for w in drawn[0].warnings if "pixels" in w]


def test_quadrature_ticks_within_one_decade_do_not_overlap(tmp_path, drawn):
    rules = {f"rule_{k}": {"grad_nodes_mean": 6 + 4 * k,
                           "head_max_error": {"median": 0.002 * (k + 1)},
                           "seconds_per_example": 0.21 + 0.04 * k,  # less than a decade
                           "completeness_abs_error": {"p99": 3e-4 * (k + 1)}}
             for k in range(5)}
    # no layer of the second task changes F enough to compare its per-head maxima, and every
    # rule is exact to float rounding
    uncompared = {name: {**rule, "head_max_error": {"median": None},
                         "completeness_abs_error": {"p99": 3.4e-8}}
                  for name, rule in rules.items()}
    reports = {"syn_mnli": {"rules": rules, "tolerance": 1e-3, "min_delta": 1e-3},
               "syn_sst2": {"rules": uncompared, "tolerance": 1e-3, "min_delta": 1e-3}}
    quadrature_figures.plot_study(reports, tmp_path / "study.png")
    empty = figure_of(drawn, "study.png").axes[2]
    assert [t.get_text() for t in empty.texts if t.get_gid() == figures.NOTE] == [
        "no layer to compare: none changes F by more than 0.001\nwhen its attention is zeroed"]
    flat = figure_of(drawn, "study.png").axes[3]
    assert [t.get_text() for t in flat.texts if t.get_gid() == figures.NOTE] == [
        "every rule's error is 3.4e-08: they do not differ here"]
    assert drawn[0].warnings == []
    assert within_bounds(tmp_path / "study.png")
    # the costs (0.21 to 0.37 s, within one decade) still have labels to read them by
    seconds = figure_of(drawn, "study.png").axes[1].xaxis
    labels = [t.get_text() for t in seconds.get_ticklabels() if t.get_text()
              and seconds.get_view_interval()[0] <= t.get_position()[0]
              <= seconds.get_view_interval()[1]]
    assert len(labels) >= 2, labels


def deletion_curves(methods: list[str]) -> pd.DataFrame:
    return pd.DataFrame([
        {"scope": ALL, "model": model, "method": method, "k": k, "idx": idx,
         "drop": 0.1 * k * (1 + m / 10), "tv": 0.05 * k * (1 + m / 10)}
        for model in ("trained", "untrained") for m, method in enumerate(methods)
        for k in range(4) for idx in range(3)])


def test_the_deletion_legend_sits_beside_the_panels_not_over_the_lines(tmp_path, drawn):
    methods = [f"method_{k}" for k in range(12)] + [RANDOM]
    interaction_figures.plot_deletion(deletion_curves(methods), "pairs", tmp_path / "del.png")
    figure = figure_of(drawn, "del.png")
    renderer = FigureCanvasAgg(figure).get_renderer()  # saving closed the figure
    legend = figure.legends[0].get_window_extent(renderer)
    assert all(not legend.overlaps(ax.get_window_extent(renderer)) for ax in figure.axes)
    assert drawn[0].warnings == [] and within_bounds(tmp_path / "del.png")


@pytest.mark.parametrize("methods", [1, 7])
def test_the_leaderboard_of_one_task_has_readable_ticks(tmp_path, drawn, methods):
    rng = np.random.default_rng(methods)
    rows = []
    for model in ("trained", "untrained"):
        for measure in MEASURES:
            for k in range(methods):
                mean = 1 / 3 + rng.uniform(-0.2, 0.2)  # long decimals, as shares of 3 examples
                rows.append({"model": model, "measure": measure, "method": f"method_{k}",
                             "mean": mean, "low": mean - 0.0333333, "high": mean + 0.0123456})
    interaction_figures.plot_leaderboard(pd.DataFrame(rows), "pairs", tmp_path / "lb.png")
    assert drawn[0].warnings == [] and within_bounds(tmp_path / "lb.png")
    # each panel titled by what it measures, in words, its x axis saying which way is better
    figure = figure_of(drawn, "lb.png")
    titles = [ax.get_title().replace("\n", " ") for ax in figure.axes]
    assert titles == [what for what, _ in MEASURES.values()]
    assert [ax.get_xlabel() for ax in figure.axes] == [
        "higher is better →" if higher else "← lower is better" for _, higher in MEASURES.values()]
    # the untrained model named as the control, in the legend over the panels
    assert [t.get_text() for t in figure.legends[0].get_texts()] == [
        "trained model", "control: untrained model (nothing learned)"]


def test_the_ground_truth_of_one_task_with_every_share_zero_reads(tmp_path, drawn):
    summary = pd.DataFrame([{"method": method, "scope": scope, "hit_share": 0.0, "mrr": 0.25,
                             "examples": 3}
                            for method in ("attattr", "attention", RANDOM)
                            for scope in ("0", "1", "any")])
    interaction_figures.plot_ground_truth(summary, "pairs", tmp_path / "gt.png")
    assert drawn[0].warnings == [] and within_bounds(tmp_path / "gt.png")


def test_permutation_shows_shares_of_kept_and_flipped_outputs_with_counts(tmp_path, drawn):
    # a confident model: every median TVD is 0 or 1
    table = pd.DataFrame({"task": "pairs", "permuted": ["0"] * 5 + ["1"] * 5 + ["all"] * 5,
                          "tvd_median": [0, 0, 0, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1, 1, 0.5]})
    summary = pd.DataFrame({"permuted": ["0", "1", "all"], "accuracy_change": [-0.2, 0, -0.6]})
    explanation_figures.plot_attention_permutation(table, summary, tmp_path / "perm.png")
    ax = figure_of(drawn, "perm.png").axes[0]
    assert not [p for p in ax.patches if type(p).__name__ == "PathPatch"]  # no box plot
    counts = [t.get_text() for t in ax.texts]
    # kept (below 0.1) 3, 4, 0; between 0, 0, 1; flipped 2, 1, 4 — empty bands unlabelled
    assert counts == ["3", "4", "", "", "", "1", "2", "1", "4"]
    heights = np.array([p.get_height() for p in ax.patches]).reshape(3, 3)
    np.testing.assert_allclose(heights.sum(axis=0), 1.0)  # each layer's shares add up
    assert drawn[0].warnings == []


def mixing_tables(top_is_self: bool) -> tuple[pd.DataFrame, pd.DataFrame]:
    rng = np.random.default_rng(0)
    tokens = pd.DataFrame({"task": "pairs", "example": np.repeat([0, 1], 12),
                           "layer": np.tile(np.repeat([1, 2, 3], 4), 2),
                           "top_is_self": top_is_self, "estimator": "exact",
                           "self_contribution": rng.uniform(0.3, 0.9, 24)})
    offsets = pd.DataFrame({"layer": np.repeat([1, 2, 3], 5), "offset": np.tile(range(-2, 3), 3),
                            "mean_contribution": rng.uniform(0, 0.5, 15)})
    return tokens, offsets


def test_a_token_mixing_share_of_one_in_every_layer_says_so(tmp_path, drawn):
    identifiability_figures.plot_token_mixing(*mixing_tables(True), tmp_path / "mix.png")
    ax = figure_of(drawn, "mix.png").axes[0]
    notes = [t.get_text() for t in ax.texts if t.get_gid() == figures.NOTE]
    assert notes == ["in every layer, every token keeps its own input\nas the largest "
                     "contributor (the next panel shows by how much)"]
    assert drawn[0].warnings == []


def test_a_token_mixing_share_that_varies_has_no_note(tmp_path, drawn):
    tokens, offsets = mixing_tables(True)
    tokens["top_is_self"] = np.arange(len(tokens)) % 3 != 0
    identifiability_figures.plot_token_mixing(tokens, offsets, tmp_path / "mix.png")
    assert not figure_of(drawn, "mix.png").axes[0].texts


def test_the_attack_names_its_task_and_planted_trigger(tmp_path, drawn):
    summary = pd.DataFrame({"trigger": ["negative #1: zt0 zu0", "negative #2: zw3",
                                        "positive #1: zt1 zu1"],
                            "trigger_class": [0, 0, 1], "before": [0.9, 0.9, 0.8],
                            "trigger_after": [0.2, 0.85, 0.3], "random_after": [0.88, 0.9, 0.8]})
    planted = {"negative": "zt0 zu0", "positive": "zt1 zu1"}
    trigger_figures.plot_attack(summary, "syn_sst2", planted, tmp_path / "attack.png")
    ax = figure_of(drawn, "attack.png").axes[0]
    assert ax.get_title() == ("syn_sst2: attack with the mined triggers\nplanted triggers: "
                              "negative = zt0 zu0; positive = zt1 zu1")
    colours = {t.get_text(): t.get_color() for t in ax.get_yticklabels()}
    assert colours["negative #1: zt0 zu0"] == colours["positive #1: zt1 zu1"] == "tab:green"
    assert colours["negative #2: zw3"] != "tab:green"
    # one row of bars per trigger, as long as the accuracies, in a plot area of 100 pixels and
    # more a trigger
    hues = [text.get_text() for text in ax.get_legend().get_texts()]
    widths = {hue: [round(bar.get_width(), 6) for bar in bars]
              for hue, bars in zip(hues, ax.containers, strict=True)}
    assert widths == {"unchanged": [0.9, 0.9, 0.8], "with trigger": [0.2, 0.85, 0.3],
                      "with random tokens": [0.88, 0.9, 0.8]}
    renderer = FigureCanvasAgg(ax.figure).get_renderer()
    assert ax.get_window_extent(renderer).height >= 100 * len(summary) / 2
    trigger_figures.plot_attack(summary.iloc[:0], "real_task", None, tmp_path / "none.png")
    assert "no planted trigger" in figure_of(drawn, "none.png")._suptitle.get_text()
    assert drawn[0].warnings == []


def test_effective_attention_of_every_head_stays_within_bounds(tmp_path, drawn):
    rng = np.random.default_rng(0)
    heads = [(layer, head) for layer in range(4) for head in range(8)]  # the default model
    per_head = pd.DataFrame([{"length": length, "layer": layer, "head": head,
                              "pearson_r": rng.uniform(0.5, 1), "relative_change": rng.uniform()}
                             for length in (12, 24, 40) for layer, head in heads])
    mass = pd.DataFrame([{"length": 40, "layer": layer, "head": head, "category": category,
                          "raw": rng.uniform(), "effective": rng.uniform(-0.2, 1)}
                         for category in ("[CLS]", "[SEP]", "filler") for layer, head in heads])
    identifiability_figures.plot_effective_attention(per_head, mass, 16, tmp_path / "eff.png")
    assert within_bounds(tmp_path / "eff.png")
    assert drawn[0].warnings == []


def test_token_identifiability_keeps_its_legend_off_the_lines(tmp_path, drawn):
    rates = pd.DataFrame([{"task": "pairs", "layer": layer, "map": g, "loss": loss,
                           "rate": min(1.0, 0.2 + 0.3 * layer + 0.1 * k)}
                          for layer in range(3) for k, g in enumerate(("linear", "mlp"))
                          for loss in ("l2", "cosine")])
    identifiability_figures.plot_token_identifiability(rates, tmp_path / "ti.png")
    assert drawn[0].warnings == [] and within_bounds(tmp_path / "ti.png")


def test_pruning_a_model_whose_accuracy_never_moves_says_so_and_the_leak_is_drawn(
        tmp_path, monkeypatch, caplog):
    kept = {}
    monkeypatch.setattr(head_figures, "save_figure",
                        lambda figure, path: (kept.setdefault(path.name, figure),
                                              figures.save_figure(figure, path)))
    caplog.set_level(logging.WARNING, logger=CHECKS)
    curves = pd.DataFrame([{"task": task, "ranking": ranking, "label": label, "order": order,
                            "k": k, "accuracy": 0.5 if task == "pairs" else 0.9 - 0.1 * k}
                           for task in ("pairs", "single")
                           for ranking, label in (("attribution", "gold"),
                                                  ("attribution", "predicted"), ("attention", ""))
                           for order in ("lowest", "highest") for k in range(5)]
                          + [{"task": task, "ranking": "random", "label": "", "order": "lowest",
                              "k": k, "accuracy": 0.5 if task == "pairs" else 0.9 - 0.05 * k}
                             for task in ("pairs", "single") for k in range(5)])
    # the leak of task single (its gold-ranked curve at k = 2 is 0.7: 0.2 below the unpruned
    # 0.9); task pairs has no leak estimate (a model at chance has it, NaN stands in for none)
    claims = pd.DataFrame([{"task": "single", "claim": LEAK, "value": -0.2,
                            "low": -0.25, "high": -0.15},
                           {"task": "pairs", "claim": LEAK, "value": np.nan,
                            "low": np.nan, "high": np.nan},
                           {"task": "single", "claim": "another", "value": 0.5, "low": 0.4,
                            "high": 0.6}])
    head_figures.plot_per_layer(curves, tmp_path / "per_layer.png", claims=claims)
    flat, moving = kept["per_layer.png"].axes
    # a random order has no lowest heads to prune first: its line is named "random"; each
    # label's ranking says whose protocol it is, in a dash style of its own
    assert [t.get_text() for t in kept["per_layer.png"].legends[0].get_texts()] == [
        "pruned", "attribution, lowest first", "attribution, highest first",
        "attention, lowest first", "attention, highest first", "random",
        "ranked by", "gold label (the paper's)", "predicted label (ours)", "no label"]
    # the gold label's curves solid, the predicted label's dashed (they coincide here)
    assert {"-", "--"} <= {line.get_linestyle() for line in moving.get_lines()}
    assert [t.get_text() for t in flat.texts] == ["accuracy, whatever is pruned: 0.5 everywhere"]
    assert not moving.texts and flat.get_title() == "task = pairs"
    assert moving.get_title() == "task = single\ngold-label leak at k=2:\n-0.2 [-0.25, -0.15]"
    # the unpruned accuracy dotted, and the leak's interval about it at k = 2: 0.65 to 0.75
    (bar,) = [c for c in moving.collections if isinstance(c, LineCollection)]
    np.testing.assert_allclose(bar.get_segments()[0], [[2, 0.65], [2, 0.75]])
    assert [line.get_ydata()[0] for line in moving.get_lines()
            if line.get_linestyle() == ":"] == [pytest.approx(0.9)]
    assert not [r for r in caplog.records if r.name == CHECKS]


def correlation_inputs() -> tuple[pd.DataFrame, pd.DataFrame]:
    """Attribution importance of 8 heads on two tasks, and their Pearson r."""
    rng = np.random.default_rng(0)
    importance = pd.DataFrame([{"method": "attribution", "task": task, "layer": k // 4,
                                "head": k % 4, "importance": rng.random()}
                               for task in ("a", "b") for k in range(8)])
    pairs = pd.DataFrame([{"task_a": "a", "task_b": "b", "kind": "tasks", "r": 0.4}])
    return importance, pairs


def test_a_correlation_the_run_cannot_test_says_so_on_the_figure(tmp_path, drawn):
    why = "each task's model starts from its own random weights"
    claims = pd.DataFrame([
        claim("task_correlation", "similar tasks correlate", "r", 0.4, NotTestable(why)),
        claim("task_correlation", "the importances are finite", "finite", 1.0, True,
              kind="check")])
    head_figures.plot_task_correlation(*correlation_inputs(), tmp_path / "untested.png",
                                       claims=claims)
    figure = figure_of(drawn, "untested.png")
    title = figure.get_suptitle().replace("\n", " ")
    assert title == f"NOT TESTABLE in this run: {why}"
    assert figure._suptitle.get_color() == "tab:red"
    assert [p.get_edgecolor()[:3] for p in figure.patches] == [to_rgb("tab:red")]
    # a finding the run judged leaves the figure as it is
    judged = claims.assign(verdict="holds", reason="")
    head_figures.plot_task_correlation(*correlation_inputs(), tmp_path / "judged.png",
                                       claims=judged)
    figure = figure_of(drawn, "judged.png")
    assert figure.get_suptitle() == "" and figure.patches == []
    assert drawn[0].warnings == []


def test_a_folder_of_figures_lists_in_numeric_order(tmp_path):
    """tree_3 before tree_10, as a reader counts, not as characters sort."""
    from attnlab.stages.figures import _pngs

    for idx in (10, 3, 1, 22):
        (tmp_path / f"tree_{idx}.png").touch()
    assert [p.rsplit("/", 1)[1] for p in _pngs(str(tmp_path))] == [
        "tree_1.png", "tree_3.png", "tree_10.png", "tree_22.png"]
    assert _pngs(str(tmp_path / "one.png")) == [str(tmp_path / "one.png")]
