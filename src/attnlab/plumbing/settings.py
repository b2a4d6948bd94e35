"""The one door for settings: a validated config, or the part of it a rule reads, as a
read-only object whose attributes are the config's keys.

    settings = Settings(load_config("config.yaml"))
    settings.attribution.tolerance        # config["attribution"]["tolerance"]

Every value is the one `attnlab.plumbing.config.validate_config` checked against the schema
(types, ranges, defaults), so a key is named in one place, the schema, and read under the same
path everywhere. A key the object does not hold fails with one line naming it and the keys it
does hold: a rule that reads a setting it was not given (as a Snakemake param, which is what
reruns the rule when the setting changes) fails at once instead of reading a default.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from attnlab.plumbing.errors import AttnlabError


class Settings(Mapping[str, Any]):
    """A read-only mapping of config keys, with the keys as attributes too; nested sections are
    Settings, lists are tuples."""

    def __init__(self, values: Mapping[str, Any], where: str = "") -> None:
        self._where = where
        self._values = {key: _frozen(value, f"{where}{key}.") for key, value in values.items()}

    def __getattr__(self, key: str) -> Any:
        if key.startswith("_"):
            raise AttributeError(key)
        try:
            return self._values[key]
        except KeyError:
            known = ", ".join(self._values) or "none"
            raise AttnlabError(f"setting {self._where}{key} was not given to this job "
                               f"(it has: {known})") from None

    def __getitem__(self, key: str) -> Any:
        return self._values[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        return f"Settings({self.to_dict()!r})"

    def to_dict(self) -> dict[str, Any]:
        """Plain dicts and lists again: for JSON, and for functions that take a config dict."""
        return {key: _thawed(value) for key, value in self._values.items()}


def _frozen(value: Any, where: str) -> Any:
    if isinstance(value, Mapping):
        return Settings(value, where)
    if isinstance(value, list | tuple):
        return tuple(_frozen(item, where) for item in value)
    return value


def _thawed(value: Any) -> Any:
    if isinstance(value, Settings):
        return value.to_dict()
    if isinstance(value, tuple):
        return [_thawed(item) for item in value]
    return value
