"""Snakemake adapter of rule download_model: a hub checkpoint's files, as published."""

import sys

from attnlab.hub import FetchError, fetch_checkpoint
from attnlab.outputs import setup_logging

log = setup_logging(snakemake.log[0])
try:
    fetch_checkpoint(snakemake.wildcards.model, snakemake.output[0])
except FetchError as err:
    log.error("%s", err)  # one line, without a traceback
    sys.exit(1)
