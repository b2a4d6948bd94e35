"""Which label's attributions rank the heads in per-layer pruning (Hao et al. 2021 Fig. 3,
`attnlab.analyses.pruning`): what tells the paper's findings, on the gold label's ranking, from
this project's, the leak of that ranking and the predicted label's ranking. Apart from
`pruning` and without torch, so that the figures (rule pruning_figures, a table-only job) read
it too."""

from __future__ import annotations

# The stage of this project's per-layer findings (the gold label's leak, the paper's
# statements on the predicted label's ranking), apart from the paper's stage "per_layer".
LABEL_STAGE = "per_layer_label"
LEAK = "ranking by the gold label leaks the answer"


def pruned_half(n_heads: int) -> int:
    """The k of "barely hurts" and of the gold label's leak: half the heads of every layer."""
    return n_heads // 2
