"""Bad agent input gets a clear error before any verl worker starts: a tool config that names a missing tool, an
agent loop that calls a tool the config lacks (sat_ext.verl.agent_config, run by prepare_verl_config), and an
agent loop whose output leaves its tool observations in the loss (sat_ext.verl.agent_turns, on the trainer's
first batch, before any update)."""

from __future__ import annotations

import json
import re
import sys
import types
from pathlib import Path

import pytest
import torch
from _verl_helpers import compose
from verl.utils.tensordict_utils import list_of_dict_to_tensordict

from sat_ext.smoke.verl_variants import VARIANTS, Paths, command, write_agent_loops, write_tools
from sat_ext.verl.agent_config import AgentConfigError, check_agent_config
from sat_ext.verl.agent_turns import ObservationMaskError, loops_named, read_batch
from sat_ext.verl.lag.prepared import prepare_verl_config

TOOLS = "actor_rollout_ref.rollout.multi_turn.tool_config_path"
LOOPS = "actor_rollout_ref.rollout.agent.agent_loop_config_path"
CALC_LOOP = "sat_ext.smoke.verl_calc.CalcToolAgentLoop"


def _tools(path: Path, class_name: str = "sat_ext.smoke.verl_calc.CalculatorTool", name: str = "calculator") -> Path:
    write_tools(path, latency_s=0.0)
    cfg = json.loads(path.read_text())
    cfg["tools"][0]["class_name"] = class_name
    cfg["tools"][0]["tool_schema"]["function"]["name"] = name
    path.write_text(json.dumps(cfg))
    return path


def _loops(path: Path, target: str = CALC_LOOP) -> Path:
    path.write_text(f"- name: calc\n  _target_: {target}\n")
    return path


def _check(tools: Path | None, loops: Path | None = None):
    overrides = [f"{TOOLS}={tools}"] if tools else []
    overrides += [f"{LOOPS}={loops}"] if loops else []
    check_agent_config(compose(overrides))


def test_a_good_config_passes(tmp_path):
    _check(_tools(tmp_path / "t.yaml"), _loops(tmp_path / "l.yaml"))
    _check(None)  # nothing named: nothing read


@pytest.mark.parametrize(
    "class_name, why",
    [
        ("sat_ext.smoke.no_such_module.CalculatorTool", "does not import (ModuleNotFoundError"),
        ("sat_ext.smoke.verl_calc.NoSuchTool", "does not import (AttributeError"),
        ("sat_ext.smoke.verl_calc.CalcToolAgentLoop", "is not a verl.tools.base_tool.BaseTool"),
        ("CalculatorTool", "must be a dotted class path"),
    ],
)
def test_a_tool_that_does_not_import_is_named_with_its_key(tmp_path, class_name, why):
    tools = _tools(tmp_path / "t.yaml", class_name=class_name)
    with pytest.raises(AgentConfigError) as err:
        _check(tools)
    assert f"{TOOLS}={tools}: tools[0].class_name" in str(err.value)
    assert why in str(err.value) and repr(class_name) in str(err.value)


def test_a_missing_tool_config_file_is_named(tmp_path):
    with pytest.raises(AgentConfigError, match=f"{TOOLS} names no file, got '{tmp_path}/none.yaml'"):
        _check(tmp_path / "none.yaml")


def test_an_agent_loop_calling_a_tool_the_config_lacks_is_named(tmp_path):
    tools = _tools(tmp_path / "t.yaml", name="adder")
    with pytest.raises(AgentConfigError) as err:
        _check(tools, _loops(tmp_path / "l.yaml"))
    message = str(err.value)
    assert message.startswith(f"{TOOLS} lacks the tools ['calculator'] that agent loop calc ({CALC_LOOP}")
    assert "it provides ['adder']" in message and repr(str(tools)) in message
    with pytest.raises(AgentConfigError, match="lacks the tools \\['calculator'\\]"):
        _check(None, _loops(tmp_path / "l.yaml"))  # no tool config at all


def test_an_agent_loop_that_does_not_import_is_named(tmp_path):
    loops = _loops(tmp_path / "l.yaml", target="sat_ext.smoke.verl_calc.NoLoop")
    with pytest.raises(AgentConfigError, match=rf"{LOOPS}={loops}: \[0\]._target_ \(calc\) does not import"):
        _check(_tools(tmp_path / "t.yaml"), loops)


def test_the_launcher_refuses_the_smoke_variant_with_a_broken_tool_before_ray(tmp_path):
    """prepare_verl_config (what ``python -m sat_ext.verl.main_ppo`` runs before Ray) on agent-bounded2's own
    command line."""
    variant = VARIANTS["agent-bounded2"]
    tools = _tools(tmp_path / "t.yaml", class_name="sat_ext.smoke.verl_calc.Calculator")
    paths = Paths(Path("/m"), Path("/t"), Path("/v"), Path("/r"), write_agent_loops(tmp_path / "l.yaml", variant))
    paths = Paths(paths.model, paths.train, paths.val, paths.reward, paths.agent_loops, None, tools)
    config = compose(command(variant, paths, steps=4, device="cpu").argv[3:])
    with pytest.raises(AgentConfigError, match="tools\\[0\\].class_name does not import"):
        prepare_verl_config(config)
    prepare_verl_config(compose(command(variant, Paths(**{**vars(paths), "tools": _tools(tools)}), 4, "cpu").argv[3:]))


# ---------------------------------------------------------------- observations in the loss, on the first batch


class _StubTQ(types.ModuleType):
    """TransferQueue's ``kv_batch_get`` over trajectories stored as verl's agent-loop worker stores them."""

    def __init__(self, store: dict):
        super().__init__("transfer_queue")
        self.store = store

    def kv_batch_get(self, keys, partition_id, select_fields):
        return list_of_dict_to_tensordict([{f: self.store[k][f] for f in select_fields} for k in keys])


def _batch(keys, tags):
    return types.SimpleNamespace(keys=keys, tags=tags, partition_id="train")


def _trajectory(mask, turns, record=None):
    extra = {"min_global_steps": 0, "max_global_steps": 1, "turn_scores": []}
    if record is not None:
        extra["sat_ext_turns"] = record
    return {"extra_fields": extra, "num_turns": turns, "response_mask": torch.tensor(mask)}


def test_a_loop_that_leaves_observations_in_the_loss_is_refused_naming_it(tmp_path, monkeypatch):
    config = compose(
        [f"{LOOPS}={_loops(tmp_path / 'l.yaml')}", "actor_rollout_ref.rollout.agent.default_agent_loop=calc"]
    )
    loops = loops_named(config)
    assert loops == (
        f"actor_rollout_ref.rollout.agent.default_agent_loop=calc, custom loops in {LOOPS}={tmp_path}/l.yaml "
        "(or the data's agent_name column)"
    )
    tags = [{"min_global_steps": 0, "max_global_steps": 1}] * 2
    good = {"u_0_0": _trajectory([1, 1, 0, 0, 1], 4, [[2, 0, 0], [1, 1, 1]]), "u_1_0": _trajectory([1, 1, 1], 2)}
    monkeypatch.setitem(sys.modules, "transfer_queue", _StubTQ(good))
    out = read_batch(_batch(list(good), tags), loops)
    assert [t.loss_tokens for t in out] == [3, 3] and out[1].turns is None
    assert [turn.as_list() for turn in out[0].turns] == [[2, 0, 0], [1, 1, 1]]

    leaky = {"u_0_0": _trajectory([1, 1, 1, 1, 1], 4, [[2, 0, 0], [1, 1, 1]]), "u_1_0": good["u_1_0"]}
    monkeypatch.setitem(sys.modules, "transfer_queue", _StubTQ(leaky))
    with pytest.raises(
        ObservationMaskError, match=f"trajectory u_0_0 has num_turns=4.*agent loops: {re.escape(loops)}"
    ):
        read_batch(_batch(list(leaky), tags), loops)

    single = {"u_1_0": good["u_1_0"]}  # single-turn, no record: no mask is read
    monkeypatch.setitem(sys.modules, "transfer_queue", _StubTQ(single))
    assert read_batch(_batch(list(single), tags[:1]), loops) is None
