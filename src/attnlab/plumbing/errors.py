"""Errors a user can fix, and how a workflow job reports them: in one line, without a traceback.

The library raises an `AttnlabError` (or a subclass) for every problem with what it was given
(data, config, model, files); its message names the file, key or column and what would work.
Any other exception is a bug, and keeps its traceback. Set ATTNLAB_TRACEBACK=1 to see the
traceback of a one-line error too.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import NoReturn

TRACEBACK_VARIABLE = "ATTNLAB_TRACEBACK"


class AttnlabError(Exception):
    """A problem with the inputs of a stage that the user can fix; the message is one line."""


class ConfigError(AttnlabError, ValueError):
    """A config value that cannot work; the message names the key and what it allows."""


class CorruptFileError(AttnlabError):
    """A finished output that changed since it was written; the message names the file and the
    rule that rebuilds it."""


def show_traceback() -> bool:
    """Whether the user asked for tracebacks (ATTNLAB_TRACEBACK set, and not to 0)."""
    return os.environ.get(TRACEBACK_VARIABLE, "") not in ("", "0")


def one_line(err: BaseException) -> str:
    """The message of `err` on one line."""
    return " ".join(str(err).split())


def stop(err: AttnlabError, prefix: str = "") -> NoReturn:
    """End the process with status 1 and `prefix` and the error's message on stderr, in one line
    (or raise it, with its traceback, when the user asked for tracebacks)."""
    if show_traceback():
        raise err
    print(prefix + one_line(err), file=sys.stderr)
    sys.exit(1)


@contextmanager
def one_line_errors() -> Iterator[None]:
    """End the process with status 1 and the error's message logged in one line (on stderr and
    in the log file, when logging is set up) if the block raises an `AttnlabError`."""
    try:
        yield
    except AttnlabError as err:
        if show_traceback():
            raise
        logging.getLogger("attnlab").error("%s", one_line(err))
        sys.exit(1)
