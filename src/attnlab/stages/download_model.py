"""Rule download_model: a hub checkpoint, fetched once into resources/."""

from __future__ import annotations

from attnlab.data.hub import fetch_checkpoint
from attnlab.job import Job


def run(job: Job) -> None:
    """Writes the configuration, tokenizer and weights of the hub model (wildcard `model`), as
    published, into the folder `model`: or only its GGUF file model.gguf_file, which holds
    all three."""
    fetch_checkpoint(job.wildcards["model"], job.outputs["model"],
                     gguf_file=job.settings.model.gguf_file)
