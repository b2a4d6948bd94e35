"""Rule download_data: one split of a hub dataset, fetched once into resources/."""

from __future__ import annotations

from attnlab.data.hub import fetch_dataset_split
from attnlab.job import Job


def run(job: Job) -> None:
    """Writes the split (wildcards dataset, subset, split) as Parquet to the output `split`, and
    where it came from with its SHA-256 to `source`."""
    wildcards = job.wildcards
    fetch_dataset_split(wildcards["dataset"], name=wildcards["subset"], split=wildcards["split"],
                        out=job.outputs["split"], source_out=job.outputs["source"])
