"""The agent loops and tools a verl config names, checked in the driver before Ray starts.

verl 0.9.1 reads them only inside its agent-loop workers (``agent_loop.py`` ``AgentLoopWorker.__init__``,
``tools/tool_registry.py``), after Ray, TransferQueue and the rollout servers are up, and a tool class that does
not import fails there as an ``AttributeError`` on a ``None`` import spec. :func:`check_agent_config` (run by
:func:`sat_ext.verl.lag.prepared.prepare_verl_config`, so by ``python -m sat_ext.verl.main_ppo``) reads them first and
raises :class:`AgentConfigError` naming the key, the file entry and the value, for:

- a tool config (``multi_turn.tool_config_path``) that is missing, has no ``tools`` list, or lists a tool whose
  ``class_name`` does not import or is not a verl ``BaseTool``, or that has no ``tool_schema.function.name``; a
  ``multi_turn.function_tool_path`` that is missing;
- an agent-loop registration (``agent.agent_loop_config_path``) without ``name`` / ``_target_``, or whose
  ``_target_`` does not import or is not a verl ``AgentLoopBase``;
- a registered agent loop whose class declares ``required_tools`` (names of tools it calls, e.g.
  :class:`sat_ext.smoke.verl_calc.CalcToolAgentLoop`) that the tool configs do not provide.

Whether an agent loop masks its tool observations shows only in its output: the lag trainer checks every batch
before its first update on it (:func:`sat_ext.verl.agent_turns.check_observation_masks`).
"""

from __future__ import annotations

import importlib
import os
from typing import Any

from omegaconf import OmegaConf

from .agent_turns import LOOPS_KEY

TOOLS_KEY = "actor_rollout_ref.rollout.multi_turn.tool_config_path"
FUNCTION_TOOLS_KEY = "actor_rollout_ref.rollout.multi_turn.function_tool_path"


class AgentConfigError(ValueError):
    """An agent loop or tool setting is invalid; ``key`` says where (the config key, and the file entry)."""

    def __init__(self, key: str, value: Any, reason: str):
        self.key, self.value, self.reason = key, value, reason
        super().__init__(f"{key} {reason}, got {value!r}")


def _path(key: str, value: str) -> str:
    from verl.utils.import_utils import resolve_config_path

    try:
        path = resolve_config_path(value)
    except FileNotFoundError:
        path = None
    if path is None or not os.path.isfile(path):
        raise AgentConfigError(key, value, "names no file")
    return path


def _import(key: str, dotted: Any, base: type) -> type:
    """The class ``dotted`` names, which must subclass ``base``."""
    if not isinstance(dotted, str) or "." not in dotted:
        raise AgentConfigError(key, dotted, "must be a dotted class path (package.module.Class)")
    module, _, name = dotted.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as err:
        raise AgentConfigError(key, dotted, f"does not import ({type(err).__name__}: {err})") from None
    if not (isinstance(cls, type) and issubclass(cls, base)):
        raise AgentConfigError(key, dotted, f"is not a {base.__module__}.{base.__name__}")
    return cls


def _tool_names(config: Any) -> set[str] | None:
    """The names of the configured tools (None: no tool is configured)."""
    from verl.tools.base_tool import BaseTool

    tools_path = OmegaConf.select(config, TOOLS_KEY)
    function_path = OmegaConf.select(config, FUNCTION_TOOLS_KEY)
    if not tools_path and not function_path:
        return None
    names: set[str] = set()
    if tools_path:
        where = f"{TOOLS_KEY}={tools_path}:"
        tools = OmegaConf.to_container(OmegaConf.load(_path(TOOLS_KEY, tools_path)), resolve=True)
        entries = tools.get("tools") if isinstance(tools, dict) else None
        if not isinstance(entries, list):
            raise AgentConfigError(f"{where} tools", entries, "must be a list of {class_name, config, tool_schema}")
        for i, entry in enumerate(entries):
            entry = entry if isinstance(entry, dict) else {}
            _import(f"{where} tools[{i}].class_name", entry.get("class_name"), BaseTool)
            name = ((entry.get("tool_schema") or {}).get("function") or {}).get("name")
            if not isinstance(name, str) or not name:
                raise AgentConfigError(f"{where} tools[{i}].tool_schema.function.name", name, "must name the tool")
            names.add(name)
    if function_path:
        from verl.tools.function_tool import load_function_tools_from_path

        names.update(tool.name for tool in load_function_tools_from_path(_path(FUNCTION_TOOLS_KEY, function_path)))
    return names


def check_agent_config(config: Any) -> None:
    """Raise :class:`AgentConfigError` for the first bad tool or agent-loop setting of ``config`` (module doc);
    a config that names neither custom agent loops nor tools is not read."""
    if not any(OmegaConf.select(config, k) for k in (TOOLS_KEY, FUNCTION_TOOLS_KEY, LOOPS_KEY)):
        return
    from verl.experimental.agent_loop import AgentLoopBase

    names = _tool_names(config)
    loops_path = OmegaConf.select(config, LOOPS_KEY)
    if not loops_path:
        return
    where = f"{LOOPS_KEY}={loops_path}:"
    loops = OmegaConf.to_container(OmegaConf.load(_path(LOOPS_KEY, loops_path)), resolve=True)
    if not isinstance(loops, list):
        raise AgentConfigError(f"{where}", loops, "must be a list of {name, _target_}")
    for i, loop in enumerate(loops):
        loop = loop if isinstance(loop, dict) else {}
        if not isinstance(loop.get("name"), str):
            raise AgentConfigError(f"{where} [{i}].name", loop.get("name"), "must name the agent loop")
        cls = _import(f"{where} [{i}]._target_ ({loop['name']})", loop.get("_target_"), AgentLoopBase)
        missing = sorted(set(getattr(cls, "required_tools", ())) - (names or set()))
        if missing:
            raise AgentConfigError(
                TOOLS_KEY,
                OmegaConf.select(config, TOOLS_KEY),
                f"lacks the tools {missing} that agent loop {loop['name']} ({loop['_target_']}, registered in "
                f"{LOOPS_KEY}) calls; it provides {sorted(names or ())}",
            )
