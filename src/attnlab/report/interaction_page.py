"""The leaderboard page of the interaction_methods stage: its tables, each with what it means."""

from __future__ import annotations

import os
from collections.abc import Mapping

import pandas as pd

from attnlab.analyses.interaction_methods import Summary
from attnlab.report.html_pages import write_tables_page


def write_leaderboard_page(path: str | os.PathLike, task: str, summary: Summary,
                           seconds: Mapping[str, float], n_examples: int) -> None:
    """The summary's tables and each method's time (`seconds` over `n_examples` examples) as
    one page."""
    timings = pd.DataFrame([{"method": method, "seconds": s, "per_example": s / n_examples}
                            for method, s in seconds.items()])
    write_tables_page(path, f"Interaction methods: {task}", [
        ("Leaderboard", "Each measure's mean over the examples with its 95 % bootstrap "
         "interval, on the trained model and on an untrained model of the same shape (what "
         "the measure gives with nothing learned). planted_*: against the planted pair; "
         "deletion_target: AOPC of the target-class probability as the method's top-k edges "
         "of every layer are zeroed (signed); deletion_tv: the same for the total variation "
         "of the class distribution (direction-free); comprehensiveness and sufficiency: "
         "ERASER token erasure by the last layer's row of the classified position "
         "(docs/interaction_methods.md). seconds_per_example: the method's own time and the "
         "forward pass every method needs.", summary.leaderboard),
        ("Claims", "", summary.claims),
        ("Pairs of methods", "method minus other, oriented so that > 0 is better, with the "
         "paired interval (a bootstrap; Newcombe's for hits) and at_bound, where both sit at "
         "one end of the measure's scale on every example.", summary.pairs),
        ("Ground truth per layer", "scope: the layer, or any layer.", summary.ground_truth),
        ("Edge deletion per scope", "scope: the layer deleted in, or all layers at once.",
         summary.deletion),
        ("Token erasure per bin", "bin: the share of ordinary tokens removed or kept.",
         summary.erasure),
        ("Time per method (s)", "", timings),
    ])
