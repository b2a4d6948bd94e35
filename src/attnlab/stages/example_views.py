"""Rule example_views: the sampled examples of a task (those whose trees rule trees drew)
attributed again, drawn as attention-vs-attribution heatmaps, and one HTML page that colours
every word (a token, or the pieces of a word the tokenizer split, merged), layer by layer, by
the attribution flowing through it; and the explorer of these examples (any layer and head,
with their effective attention) and of the first example the interaction methods scored (with
every method's maps beside them)."""

from __future__ import annotations

import logging
from pathlib import Path

import pandas as pd

from attnlab.analyses import views
from attnlab.analyses.effective_attention import effective_maps
from attnlab.analyses.trees import planted_pair, sample_examples, tree_from_dump
from attnlab.data.dumps import has_words, read_task_dump, word_row
from attnlab.engine.examples import encoded_frame
from attnlab.model_job import ModelJob
from attnlab.plumbing.outputs import atomic_path
from attnlab.report.explorer import SUMMED, example_data, explorer_page
from attnlab.report.flow_figures import example_section, flow_page, plot_heatmaps

log = logging.getLogger(__name__)


def run(job: ModelJob) -> None:
    """Writes the folder views as a whole: heatmap_<idx>.png of every sampled example,
    index.html, with every figure (the tree figures of rule trees too) embedded, and
    explorer.html."""
    cfg = job.settings.trees
    dump, _ = read_task_dump(job.paths("parts"))
    chosen = sample_examples(dump["idx"].tolist(), cfg.examples, list(cfg.example_idx),
                             job.settings.seed)
    scores = pd.read_parquet(job.inputs["scores"])
    # the sampled examples are seldom among the few the methods scored: the explorer adds one
    explored = chosen + [int(idx) for idx in scores["idx"].unique()[:1] if idx not in chosen]
    rows = dump[dump["idx"].isin(explored)].reset_index(drop=True)
    dev = job.split("dev")
    dev = dev.set_index("idx", drop=False) if "idx" in dev else dev
    if len(rows):  # trees.examples may be 0 and example_idx empty: an empty page
        encoded = encoded_frame(dev.loc[rows["idx"]], job.spec, job.tokenizer, job.settings.model)
        result = views.attribute_again(job.model, encoded, job.settings.attribution, job.device)
        effective = effective_maps(job.model, encoded)
    label_names = job.class_names
    sections, examples = [], []
    with atomic_path(job.outputs["views"]) as folder:
        folder.mkdir()
        for b, row in rows.iterrows():
            attr, attention = views.example_matrices(result, b, int(row["n_tokens"]))
            gap = views.dump_gap(row, attr)
            # drawn over words, as the trees are
            maps = views.word_maps(row, {"attention": attention,
                                         "effective attention": effective[b],
                                         "attribution": attr}, summed=SUMMED)
            methods = views.word_maps(row, views.method_maps(scores, row["idx"]), summed=SUMMED)
            attr, attention = maps["attribution"], maps["attention"]
            shown = word_row(row)
            # the explorer draws the tree as rule trees does: from the dump row, over words
            examples.append(example_data(shown, maps, tree_from_dump(
                shown, len(attr), cfg.tau, cfg.normalise, causal=job.next_token),
                label_names, methods))
            if row["idx"] not in chosen:
                continue
            layer = views.heatmap_layer(cfg.heatmap_layer, attr)
            log.info("example %d: recomputed per-head maxima differ from the dump by at most "
                     "%.2g; heatmaps of layer %d", row["idx"], gap, layer)
            heatmap = folder / f"heatmap_{row['idx']}.png"
            plot_heatmaps(shown, attention, attr, layer, label_names, planted_pair(shown),
                          heatmap)
            tree = Path(job.inputs["tree_figures"]) / f"tree_{row['idx']}.png"
            sections.append(example_section(shown, views.token_flow(attr.sum(axis=1)),
                                            label_names, [heatmap, tree]))
        page = flow_page(f"attribution flow through the tokens: task {job.task}", sections,
                         merged_words=any(has_words(row) for _, row in rows.iterrows()))
        (folder / "index.html").write_text(page)
        (folder / "explorer.html").write_text(
            explorer_page(f"explorer: task {job.task}", examples))
    log.info("views of %d examples (idx %s), the explorer of %d", len(chosen), chosen,
             len(examples))
