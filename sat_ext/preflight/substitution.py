"""The substitution table: every key whose value the preflight changes, with the config's value, the value run and
why, and every key that cannot be honoured here ("not checked"), kept beside each run as ``substitutions.md``.

:class:`Edits` builds the run's config from the user's: each change goes through it, so nothing changes without a
row. Values are compared and shown unresolved (an interpolation such as ``${data.max_response_length}`` is kept
and shown as written).
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig, OmegaConf

from sat_ext.lag.config import LagConfig
from sat_ext.runlog import Expectation

ABSENT = "(absent)"  # the config does not have the key
NOT_RUN = "(not run)"  # the key is dropped: the strategy run here has no such setting


@dataclass(frozen=True)
class Row:
    """One changed key: the config's value, the value run (:data:`NOT_RUN` when dropped) and why."""

    key: str
    config: Any
    run: Any
    why: str


@dataclass(frozen=True)
class Unchecked:
    """A key that defines the algorithm but cannot be honoured on this machine: the run goes on without it only
    where ``--allow-unchecked`` names it."""

    key: str
    value: Any
    why: str


@dataclass(frozen=True)
class Plan:
    """What a preflight runs: ``run`` (verl: the config; OpenRLHF: the flags), its substitution table, the keys not
    checked, the scale factor, the steps, the lag block, what the log must show and the evaluation's samples per
    problem where a check reads it from here (OpenRLHF)."""

    run: Any
    rows: list[Row]
    unchecked: list[Unchecked]
    factor: int
    steps: int
    lag: LagConfig | None
    expectation: Expectation
    eval_n: int | None = None


def raw(config: DictConfig, key: str, default: Any = ABSENT) -> Any:
    """The unresolved value at dotted ``key`` (a plain container for a node), ``default`` when absent."""
    node: Any = config
    for part in key.split("."):
        if not isinstance(node, DictConfig) or part not in node:
            return default
        node = node._get_node(part)
    if isinstance(node, DictConfig) or OmegaConf.is_list(node):
        return OmegaConf.to_container(node, resolve=False)
    return node._value()


class Edits:
    """A copy of a config to edit, and the rows of what changed."""

    def __init__(self, config: DictConfig):
        self.config = copy.deepcopy(config)
        OmegaConf.set_struct(self.config, False)
        self.rows: list[Row] = []

    def get(self, key: str, default: Any = ABSENT) -> Any:
        return raw(self.config, key, default)

    def set(self, key: str, value: Any, why: str) -> None:
        """Set ``key`` (created if absent); a row when the value changes."""
        old = self.get(key)
        if old != value:
            self.rows.append(Row(key, old, value, why))
        OmegaConf.update(self.config, key, value, merge=False, force_add=True)

    def drop(self, key: str, why: str) -> None:
        """Remove ``key`` (absent: nothing) with a row."""
        old = self.get(key)
        if old == ABSENT:
            return
        parent, _, leaf = key.rpartition(".")
        node = OmegaConf.select(self.config, parent) if parent else self.config
        del node[leaf]
        self.rows.append(Row(key, old, NOT_RUN, why))


def show(value: Any, width: int = 60) -> str:
    """A value for a table cell: JSON-like, ``|`` escaped, cut at ``width`` characters."""
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    text = text.replace("|", "\\|").replace("\n", " ")
    return text if len(text) <= width else text[: width - 3] + "..."


def markdown(title: str, notes: list[str], rows: list[Row], unchecked: list[Unchecked], allowed: set[str]) -> str:
    """``substitutions.md``: the notes, the table of changed keys, and the keys not checked."""
    lines = [
        f"# {title}",
        "",
        *notes,
        "",
        "| key | the config's value | the value run | why |",
        "| --- | --- | --- | --- |",
    ]
    lines += [f"| `{r.key}` | {show(r.config)} | {show(r.run)} | {r.why} |" for r in rows]
    if unchecked:
        lines += [
            "",
            "## Not checked here",
            "",
            "| key | value | why | allowed by --allow-unchecked |",
            "| --- | --- | --- | --- |",
        ]
        lines += [
            f"| `{u.key}` | {show(u.value)} | {u.why} | {'yes' if u.key in allowed else 'no'} |" for u in unchecked
        ]
    return "\n".join(lines) + "\n"
