"""Head importance across tasks (Hao et al. 2021 §4, Fig. 5): the correlation, Pearson and
Spearman, of the attribution head-importance vectors of every pair of tasks, beside two
controls computed by the same code, and the findings that similar tasks correlate more than
dissimilar ones and more than with a task that learned nothing of its labels.

Every r has a bootstrap interval over the heads (the heads resampled with replacement, the
same draw for both tasks of a pair). The controls:

* floor: each task against a random permutation of its own heads (seeded): the r of a head
  ranking that knows nothing of the task, 0 in expectation;
* ceiling: each task against the same task fine-tuned with another seed (config `seeds`: the
  run's next seed), how far two fine-tunings of one task agree; not available in a one-seed
  run (its row says why);
* shuffled-label floor: every task against a task fine-tuned on labels permuted among its
  examples (config `tasks.<name>.shuffle_labels`, kind "shuffled"): how much two models
  correlate from their shared pre-trained start and fine-tuning on the same text, with
  nothing learned about the labels.

The similar and dissimilar pairs are the configuration's (`heads.similar_pairs`,
`heads.dissimilar_pairs`): the paper's text, as far as we can quote it, prints neither the
pairs nor a bar for "strong", so the findings are comparisons: similar pairs above their
tasks' r with a shuffled-label task (where the run has one), and above dissimilar pairs, each
paired over the same head resamples. Not above 0, the permutation floor's r: two fine-tunings
of one pre-trained start correlate well above it whatever their labels (the shuffled-label
floor of the real tasks, docs/real.md), so clearing 0 says nothing of similar tasks.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from attnlab.analyses import verdicts
from attnlab.analyses.claims import NotTestable, finding, source
from attnlab.analyses.verdicts import ONE_POINT, Bar
from attnlab.plumbing.errors import AttnlabError, ConfigError

METHODS = ("pearson", "spearman")
COLUMNS = ["task_a", "task_b", "kind", "method", "r", "low", "high", "heads", "reason"]
NO_CEILING = ("one seed: no second fine-tuning of the task in this run (config seeds lists "
              "more)")


def importance_matrix(importance: pd.DataFrame, method: str = "attribution") -> pd.DataFrame:
    """The head-importance vectors of the tasks of `importance` (its `method` rows): one row per
    (layer, head), one column per task in the order of first appearance."""
    wide = (importance[importance["method"] == method]
            .pivot_table(index=["layer", "head"], columns="task", values="importance", sort=False))
    if wide.isna().any().any():
        raise AttnlabError("task_correlation: the tasks' models have different numbers of heads")
    return wide


def _pearson(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Pearson r of x and y along axis 1 (resamples, heads)."""
    x = x - x.mean(axis=1, keepdims=True)
    y = y - y.mean(axis=1, keepdims=True)
    norm = np.sqrt((x * x).sum(axis=1) * (y * y).sum(axis=1))
    # a resample that drew one head only has no spread to correlate: 0, its value under no
    # association (it only happens with a handful of heads)
    return np.divide((x * y).sum(axis=1), norm, out=np.zeros(len(x)), where=norm > 0)


def correlation(sample: np.ndarray, a: int, b: int, method: str) -> np.ndarray:
    """r of columns a and b of resampled heads `sample` (resamples, heads, columns), one per
    resample; Spearman's is Pearson's of the ranks (ties, a head drawn twice, share the mean
    rank)."""
    x, y = sample[..., a], sample[..., b]
    if method == "spearman":
        x, y = stats.rankdata(x, axis=1), stats.rankdata(y, axis=1)
    return _pearson(x, y)


def pair_interval(vectors: np.ndarray, method: str) -> verdicts.Interval:
    """r of the two columns of `vectors` (heads, 2) with its bootstrap interval over heads."""
    return verdicts.bootstrap(vectors, lambda sample: correlation(sample, 0, 1, method),
                              scale=verdicts.SIGNED_UNIT)


def _rows(task_a: str, task_b: str, kind: str, vectors: np.ndarray) -> list[dict[str, Any]]:
    rows = []
    for method in METHODS:
        interval = pair_interval(vectors, method)
        rows.append({"task_a": task_a, "task_b": task_b, "kind": kind, "method": method,
                     "r": interval.estimate, "low": interval.low, "high": interval.high,
                     "heads": interval.n, "reason": ""})
    return rows


def task_correlations(wide: pd.DataFrame, other_seed: pd.DataFrame | None, *,
                      seed: int, shuffled: Collection[str] = ()) -> pd.DataFrame:
    """r of every pair of tasks (task_a before task_b in `wide`'s order; kind "shuffled" where
    one of them is a task of `shuffled`, whose labels were shuffled, else "tasks"), and per
    task its floor (a permutation of its heads drawn under [seed, k] for the k-th task) and its
    ceiling (against `other_seed`, the same tasks' matrix at another seed; None: not
    available), each Pearson and Spearman with its interval (columns COLUMNS)."""
    names = list(wide.columns)
    rows = [row for i, a in enumerate(names) for b in names[i + 1:]
            for row in _rows(a, b, "shuffled" if {a, b} & set(shuffled) else "tasks",
                             wide[[a, b]].to_numpy())]
    for k, task in enumerate(names):
        values = wide[task].to_numpy()
        permuted = np.random.default_rng([seed, k]).permutation(values)
        rows += _rows(task, task, "floor", np.column_stack([values, permuted]))
        if other_seed is None or task not in other_seed:
            rows += [{"task_a": task, "task_b": task, "kind": "ceiling", "method": method,
                      "r": np.nan, "low": np.nan, "high": np.nan, "heads": len(wide),
                      "reason": NO_CEILING} for method in METHODS]
            continue
        twin = other_seed[task].reindex(wide.index).to_numpy()
        rows += _rows(task, task, "ceiling", np.column_stack([values, twin]))
    return pd.DataFrame(rows, columns=COLUMNS)


def _columns(wide: pd.DataFrame, pair: list[str]) -> tuple[int, int]:
    names = list(wide.columns)
    a, b = pair
    if a not in names or b not in names:
        raise ConfigError(f"heads pairs: no correlation of tasks {a!r} and {b!r} (are both "
                          "tasks?)")
    return names.index(a), names.index(b)


def why_not_comparable(model: Mapping[str, Any], tasks: Mapping[str, Mapping[str, Any]]
                       ) -> NotTestable | None:
    """Why the configuration cannot test the paper's cross-task statements, or None. They
    compare head h across the tasks' models, as the paper's tasks share one pre-trained BERT
    and share language: models built from scratch without a shared start (model.pretrain) have
    unrelated heads, and synthetic tasks share no words or planted pairs (each kind has its
    own), so no head has a reason to matter for two of them alike."""
    reasons = []
    if model["source"] == "scratch" and not model["pretrain"]["epochs"]:
        reasons.append("each task's model starts from its own random weights (model.source "
                       "scratch, model.pretrain.epochs 0), so head h of one model has no "
                       "counterpart in another")
    synthetic = [name for name, task in tasks.items() if task["source"] == "synthetic"]
    if synthetic:
        reasons.append(f"synthetic tasks ({', '.join(synthetic)}) share no words or planted "
                       "pairs, so the papers' similar and dissimilar tasks have no counterpart")
    return NotTestable("; ".join(reasons)) if reasons else None


def cross_task_claims(
    wide: pd.DataFrame, similar: list[list[str]], dissimilar: list[list[str]], *,
    shuffled: Collection[str] = (), untestable: NotTestable | None = None,
) -> list[dict[str, Any]]:
    """The Fig. 5 findings on the configured pairs, Pearson and Spearman, on the
    head-importance matrix `wide` (`importance_matrix`), comparisons paired over the same head
    resamples: each similar pair correlates above the larger r of its two tasks with each task
    of `shuffled` (labels shuffled; task "<pair> against <shuffled task>"), and similar pairs
    correlate more than dissimilar ones (the mean r of the similar pairs minus that of the
    dissimilar ones; no `task`; "not testable" where pairs of one kind only are configured).
    With `untestable` (why_not_comparable) each is "not testable"."""
    similar_columns = [_columns(wide, p) for p in similar]
    dissimilar_columns = [_columns(wide, p) for p in dissimilar]
    floors = [list(wide.columns).index(name) for name in shuffled]
    matrix = wide.to_numpy()
    heads = f"95 % interval over the {len(wide)} heads"
    claims = []
    for method in METHODS:
        for pair, (a, b) in zip(similar, similar_columns, strict=True):
            for name, f in zip(shuffled, floors, strict=True):
                def above_floor(sample: np.ndarray, a: int = a, b: int = b, f: int = f,
                                m: str = method) -> np.ndarray:
                    return correlation(sample, a, b, m) - np.maximum(
                        correlation(sample, a, f, m), correlation(sample, b, f, m))

                claims.append({"task": f"{'–'.join(pair)} against {name}", **finding(
                    "task_correlation", f"similar tasks correlate more than with a "
                    f"shuffled-label task ({method})",
                    f"{method} r of the pair minus the larger of its tasks' r with {name} "
                    f"(fine-tuned on shuffled labels), paired {heads} (holds above "
                    f"{ONE_POINT}: one point, our choice)",
                    untestable or verdicts.bootstrap(matrix, above_floor),
                    Bar(ONE_POINT), source("hao2021", "fig5_tasks"))})
        if similar or dissimilar:
            def gap(sample: np.ndarray, m: str = method) -> np.ndarray:
                mean_r = [np.mean([correlation(sample, a, b, m) for a, b in columns], axis=0)
                          for columns in (similar_columns, dissimilar_columns)]
                return mean_r[0] - mean_r[1]

            claims.append({"task": None, **finding(
                "task_correlation", f"similar tasks correlate more than dissimilar ones "
                f"({method})",
                f"mean {method} r of the similar pairs minus that of the dissimilar pairs, "
                f"paired {heads} (the same resample for every pair; holds above {ONE_POINT}: one "
                f"point, our choice)",
                untestable or (verdicts.bootstrap(matrix, gap) if similar and dissimilar else
                               NotTestable("it needs a similar and a dissimilar pair "
                                           "(heads.similar_pairs, heads.dissimilar_pairs)")),
                Bar(ONE_POINT), source("hao2021", "fig5_tasks"))})
    return claims
