"""Snakemake adapter of rule download_data: one split of a hub dataset, as Parquet."""

import sys

from attnlab.hub import FetchError, fetch_dataset_split
from attnlab.outputs import setup_logging

log = setup_logging(snakemake.log[0])
wildcards = snakemake.wildcards
try:
    fetch_dataset_split(wildcards.dataset, wildcards.subset, wildcards.split, snakemake.output[0])
except FetchError as err:
    log.error("%s", err)  # one line, without a traceback
    sys.exit(1)
