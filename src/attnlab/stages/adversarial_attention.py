"""Rule adversarial_attention (Drozdyuk et al.; Jain & Wallace 2019): adversarial keys, trained
on a task's first training sentences and evaluated on its first dev examples, and the
adversarial attention of each configured layer, and the statements judged on them."""

from __future__ import annotations

import logging

import pandas as pd
from tqdm import tqdm

from attnlab.analyses import adversarial_attention
from attnlab.analyses.claims import log_claims, on_models
from attnlab.model_job import ModelJob
from attnlab.report.explanation_figures import plot_adversarial

log = logging.getLogger(__name__)


def run(job: ModelJob) -> None:
    """Writes the tables key_table, attention_table and claims, and the figure."""
    settings = job.settings.explanation
    keys_cfg, attention_cfg = settings.adversarial_keys, settings.adversarial_attention
    seed = job.settings.seed
    layers = adversarial_attention.searched_layers(job.model, attention_cfg.layers)
    train = job.encoded("train", keys_cfg.train_examples)
    log.info("task %s: key adversary trained on %d training sentences", job.task,
             len(train["input_ids"]))
    adversary = adversarial_attention.train_key_adversary(job.model, train, keys_cfg,
                                                          settings.batch_size, seed)
    keys = adversarial_attention.evaluate_key_adversary(
        job.model, adversary, job.encoded("dev", keys_cfg.examples), settings.batch_size)
    dev = job.encoded("dev", attention_cfg.examples)
    frames = []
    for layer in tqdm(layers, desc="adversarial attention", mininterval=5):
        log.info("task %s: adversarial attention of layer %d for %d dev examples", job.task,
                 layer, len(dev["input_ids"]))
        frames.append(adversarial_attention.adversarial_attention(
            job.model, dev, layer, attention_cfg, settings.batch_size, seed))
    attention = pd.concat(frames, ignore_index=True)
    claims = on_models(pd.DataFrame(adversarial_attention.claims(
        keys, attention, attention_cfg.epsilon, keys_cfg.distance_cap)), job.finetune_metrics)
    job.write_tables({"key_table": keys, "attention_table": attention, "claims": claims})
    plot_adversarial(keys, attention, attention_cfg.epsilon, job.outputs["figure"])
    log_claims(claims, job.task)
