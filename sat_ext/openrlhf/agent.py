"""The launch check of ``--train.agent_func_path``: the agent file OpenRLHF 0.11.2 loads in each vLLM actor.

OpenRLHF passes the path to every vLLM Ray actor (cli/train_ppo_ray.py:79), which loads it there, in
``RolloutRayActor.__init__`` (trainer/ray/vllm_engine.py:56-57, ``_load_agent_executor`` at :19-30): it asserts the
``.py`` suffix, executes the file as a module, asserts an ``AgentExecutor`` that subclasses ``AgentExecutorBase``,
and calls ``AgentExecutor()`` with no argument. A file that fails any of these fails there, inside Ray, after
DeepSpeed and vLLM have started. :func:`check_agent_args` runs the same steps in the launcher before anything
starts and refuses the run with a message naming the flag, the path and what is wrong. It executes the file's
module level once in the launcher's process (as each vLLM actor will), but does not construct the executor: it
checks that ``AgentExecutor()`` would bind its arguments and that the class is not abstract.
"""

from __future__ import annotations

import importlib.util
import inspect
from pathlib import Path
from types import SimpleNamespace

FLAG = "--train.agent_func_path"


def _module(path: Path):
    spec = importlib.util.spec_from_file_location("agent_module", path)  # OpenRLHF's module name for it
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def check_agent_file(path_text: str) -> type:
    """The ``AgentExecutor`` class of the agent file at ``path_text``; raises ValueError naming :data:`FLAG` and the
    path when OpenRLHF's vLLM actors could not load it (module doc)."""
    from openrlhf.utils.agent import AgentExecutorBase

    path = Path(path_text)
    where = f"{FLAG} {path_text}"
    if path.suffix != ".py":
        raise ValueError(f"{where}: OpenRLHF loads the agent from a Python file ending in .py")
    if not path.is_file():
        raise ValueError(f"{where}: no such file (the path is read by each vLLM actor, so give it absolute)")
    try:
        module = _module(path)
    except Exception as e:
        raise ValueError(f"{where}: the file does not import ({type(e).__name__}: {e})") from e
    executor = getattr(module, "AgentExecutor", None)
    if executor is None:
        raise ValueError(
            f"{where}: the file defines no AgentExecutor (OpenRLHF looks up that name: a subclass of "
            "openrlhf.utils.agent.AgentExecutorBase, e.g. of MultiTurnAgentExecutor)"
        )
    if not (isinstance(executor, type) and issubclass(executor, AgentExecutorBase)):
        raise ValueError(f"{where}: AgentExecutor is not a subclass of openrlhf.utils.agent.AgentExecutorBase")
    if inspect.isabstract(executor):
        missing = ", ".join(sorted(executor.__abstractmethods__))
        raise ValueError(f"{where}: AgentExecutor is abstract (it does not implement {missing})")
    try:
        inspect.signature(executor).bind()
    except TypeError as e:
        raise ValueError(
            f"{where}: OpenRLHF constructs AgentExecutor() with no argument, but {e} (a MultiTurnAgentExecutor "
            "subclass passes its AgentInstance class to super().__init__ in its own __init__)"
        ) from e
    return executor


def check_agent_args(args: SimpleNamespace) -> None:
    """The launcher's check of OpenRLHF's final arguments: the agent file, where one is given."""
    path = args.train.agent_func_path
    if path:
        check_agent_file(path)
