"""What the head stages (importance and pruning) read of a task: its model, encoded dev split
and attribution dumps, checked against one another."""

from __future__ import annotations

import logging
import os
from typing import Any

import numpy as np
import pandas as pd
import torch
from transformers import PreTrainedModel

from attnlab.data import dumps, tasks
from attnlab.engine import examples, models
from attnlab.plumbing.errors import AttnlabError

log = logging.getLogger(__name__)

# The dump column each dump-based importance method averages.
DUMP_COLUMNS = {"attribution": "attr_max", "attention": "attn_max"}


def warn_if_pred_target(target: str) -> None:
    """The paper ranks heads by gold-label attributions; say so when the dumps are not that."""
    if target == "pred":
        log.warning("attribution.target is 'pred': head rankings use attributions to the "
                    "predicted label, not the gold label as in the paper")


def load_task(
    model_dir: str | os.PathLike,
    dev_path: str | os.PathLike,
    dump_paths: list[str | os.PathLike],
    spec: tasks.TaskSpec,
    model_cfg: dict[str, Any],
    device: torch.device,
) -> tuple[PreTrainedModel, dict[str, torch.Tensor], pd.DataFrame, dict[str, np.ndarray]]:
    """A task's model, encoded dev split, dump and dump arrays (the dump covers a dev prefix)."""
    model, tokenizer = models.load_classifier(model_dir, device)
    dev = tasks.load_split(dev_path, spec)
    dump, meta = dumps.read_task_dump(dump_paths)
    if (meta["n_layers"], meta["n_heads"]) != models.head_shape(model):
        raise AttnlabError(f"the attribution dump has {meta['n_layers']}x{meta['n_heads']} "
                           f"heads, the model {models.head_shape(model)}: rebuild it with "
                           "--forcerun attribute")
    if "idx" in dev and not np.array_equal(dump["idx"], dev["idx"].iloc[: len(dump)]):
        raise AttnlabError("the attribution dump's rows are not the first dev examples in "
                           "order: rebuild it with --forcerun attribute")
    inputs = examples.encoded_frame(dev, spec, tokenizer, model_cfg)
    arrays = {m: dumps.dump_scores(dump, c, meta["n_layers"], meta["n_heads"])
              for m, c in DUMP_COLUMNS.items()}
    return model, inputs, dump, arrays
