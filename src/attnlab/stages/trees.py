"""Rule trees (Hao et al. 2021 §5): the attribution tree of every attributed dev example of a
task, read from its dumps; their sizes, figures of a sample of them and, on tasks with planted
pairs, whether the trees find the pair that decides the label."""

from __future__ import annotations

import json
import logging

from attnlab.analyses import trees
from attnlab.analyses.claims import claims_frame, log_claims, on_models
from attnlab.data.dumps import read_task_dump, word_level
from attnlab.job import Job
from attnlab.plumbing.outputs import atomic_path
from attnlab.report.flow_figures import plot_tree, plot_tree_sizes

log = logging.getLogger(__name__)


def run(job: Job) -> None:
    """Writes the tables edges, trees and claims, the JSON summary, the figure sizes and the
    tree figures of the sampled examples into the folder `figures`."""
    cfg = job.settings.trees
    dump, meta = read_task_dump(job.inputs["parts"])
    dump = word_level(dump)  # a word split into pieces is one node
    n_layers = meta["n_layers"]
    chosen = trees.sample_examples(dump["idx"].tolist(), cfg.examples, list(cfg.example_idx),
                                   job.settings.seed)
    log.info("task %s: trees of %d examples, tau %s, normalised by the %s maximum", job.task,
             len(dump), cfg.tau, cfg.normalise)
    edges, table = trees.tree_tables(dump, n_layers, cfg.tau, cfg.normalise,
                                     causal=job.next_token, seed=job.settings.seed)
    claims = on_models(claims_frame(trees.tree_claims(table)), job.finetune_metrics)
    summary = trees.size_summary(table)
    if summary["incomplete_trees"]:
        log.warning("%d trees may lack edges: the dumps' attribution.max_edges_per_layer cut edges "
                    "above tau in some of their layers (trees.parquet: incomplete_layers); "
                    "attribute with a higher cap for exact trees", summary["incomplete_trees"])
    share, n_planted = trees.planted_share(table)
    summary["planted_pair"] = {"examples": n_planted, "share": share if n_planted else None}
    job.write_tables({"edges": edges, "trees": table, "claims": claims})
    job.write_json("summary", summary)
    plot_tree_sizes(table, job.outputs["sizes"])
    with atomic_path(job.outputs["figures"]) as folder:
        folder.mkdir()
        for _, row in dump[dump["idx"].isin(chosen)].iterrows():
            tree = trees.tree_from_dump(row, n_layers, cfg.tau, cfg.normalise,
                                        causal=job.next_token)
            # a decoder's classes are its vocabulary: the figure names the token ids
            label_names = [] if job.next_token else list(job.spec.label_names)
            plot_tree(row, tree, n_layers, label_names, cfg.tau,
                      trees.planted_pair(row), folder / f"tree_{row['idx']}.png")
    log.info("tree sizes: %s", json.dumps(summary))
    log_claims(claims, job.task)
