"""The launcher's check of ``--train.agent_func_path`` (sat_ext.openrlhf.agent): each way OpenRLHF 0.11.2's vLLM actors
would fail to load an agent file (trainer/ray/vllm_engine.py:19-30) is refused before anything starts, with a message
naming the flag and the path; a good file passes, and OpenRLHF's own loader agrees with the check on every file."""

from __future__ import annotations

import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest

pytest.importorskip("openrlhf")

from sat_ext.openrlhf.agent import FLAG, check_agent_args, check_agent_file  # noqa: E402

GOOD = """
    from openrlhf.utils.agent import AgentInstanceBase, MultiTurnAgentExecutor

    class Episode(AgentInstanceBase):
        def __init__(self, *args, **kwargs):
            pass

        async def step(self, state_dict, **kwargs):
            return {}

    class AgentExecutor(MultiTurnAgentExecutor):
        def __init__(self):
            super().__init__(Episode)
"""
BAD = {
    "no_executor": ("x = 1\n", "defines no AgentExecutor"),
    "not_a_subclass": (
        "class AgentExecutor:\n    pass\n",
        "is not a subclass of openrlhf.utils.agent.AgentExecutorBase",
    ),
    "abstract": (
        "from openrlhf.utils.agent import AgentExecutorBase\nclass AgentExecutor(AgentExecutorBase):\n    pass\n",
        "AgentExecutor is abstract (it does not implement execute)",
    ),
    "needs_an_argument": (
        "from openrlhf.utils.agent import MultiTurnAgentExecutor\nclass AgentExecutor(MultiTurnAgentExecutor):\n"
        "    pass\n",
        "OpenRLHF constructs AgentExecutor() with no argument, but missing a required argument: 'agent_instance_cls'",
    ),
    "does_not_import": ("import no_such_module_here\n", "the file does not import (ModuleNotFoundError"),
}


def _write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(textwrap.dedent(text))
    return path


def _refused(path: Path | str) -> str:
    with pytest.raises(ValueError) as err:
        check_agent_file(str(path))
    msg = str(err.value)
    assert msg.startswith(f"{FLAG} {path}: "), msg
    return msg


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_file_openrlhf_could_not_load_is_refused_naming_flag_and_path(tmp_path, case):
    from openrlhf.trainer.ray.vllm_engine import _load_agent_executor

    text, expected = BAD[case]
    path = _write(tmp_path, f"{case}.py", text)
    assert expected in _refused(path)
    with pytest.raises((AssertionError, TypeError, ImportError)):  # what each actor would raise, inside Ray
        _load_agent_executor(str(path))


def test_a_missing_file_and_a_non_python_path_are_refused(tmp_path):
    assert "no such file" in _refused(tmp_path / "missing.py")
    assert "a Python file ending in .py" in _refused(_write(tmp_path, "agent.txt", GOOD))


def test_a_good_file_passes_and_no_agent_path_checks_nothing(tmp_path):
    from openrlhf.trainer.ray.vllm_engine import _load_agent_executor

    path = _write(tmp_path, "agent.py", GOOD)
    assert check_agent_file(str(path)).__name__ == "AgentExecutor"
    assert type(_load_agent_executor(str(path))).__name__ == "AgentExecutor"
    check_agent_args(SimpleNamespace(train=SimpleNamespace(agent_func_path=None)))
    check_agent_args(SimpleNamespace(train=SimpleNamespace(agent_func_path=str(path))))
