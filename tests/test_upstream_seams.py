"""Each private verl / OpenRLHF member sat_ext uses has one home: its framework's ``_upstream.py``.

Static (AST only, no framework import; < 1 s): the private names listed there (``Private(module, name, use)``)
appear in no other module of the package; no other module imports a private name from verl / OpenRLHF, calls a
private method through ``super()``, or rebinds a function's ``__globals__``. The CPU setups
(``sat_ext/*/cpu/``) list theirs in ``cpu/upstream.py`` (``Private`` and ``Patch`` entries) and override verl's
vLLM worker hooks through ``verl/cpu/worker_seam.py``; the CPU demo (``sat_ext/demo``) is left out: it reaches verl's
private ``_update_weights`` only through the CPU setup.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "sat_ext"
SEAMS = [
    *(PACKAGE / fw / "_upstream.py" for fw in ("verl", "openrlhf")),
    *(PACKAGE / fw / "cpu" / "upstream.py" for fw in ("verl", "openrlhf")),
    PACKAGE / "verl" / "cpu" / "worker_seam.py",
]
UPSTREAM = ("verl", "openrlhf", "transfer_queue")


def _listed_names() -> set[str]:
    names = set()
    for seam in SEAMS:
        for node in ast.walk(ast.parse(seam.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) in ("Private", "Patch"):
                dotted = node.args[1].value
                names.update(
                    p for p in dotted.replace(":", ".").split(".") if p.startswith("_") and not p.startswith("__")
                )
    return names


def _modules() -> list[Path]:
    skip = {PACKAGE / "demo", PACKAGE / "core"}
    return [p for p in sorted(PACKAGE.rglob("*.py")) if p not in SEAMS and not any(s in p.parents for s in skip)]


def _identifiers(tree: ast.AST) -> set[str]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            out.add(node.attr)
        elif isinstance(node, ast.Name):
            out.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out.add(node.name)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.isidentifier():
            out.add(node.value)
    return out


def test_the_seams_list_what_the_package_uses():
    listed = _listed_names()
    assert {"_evict_terminal_groups", "_compute_old_log_prob", "_generate_vllm", "_option_string_actions"} <= listed


def test_no_module_outside_the_seams_names_a_listed_private_member():
    listed = _listed_names()
    found = {
        str(p.relative_to(PACKAGE.parent)): sorted(_identifiers(ast.parse(p.read_text())) & listed) for p in _modules()
    }
    assert {k: v for k, v in found.items() if v} == {}


def test_no_module_outside_the_seams_reaches_upstream_internals_another_way():
    problems = []
    for path in _modules():
        for node in ast.walk(ast.parse(path.read_text())):
            where = f"{path.relative_to(PACKAGE.parent)}:{getattr(node, 'lineno', 0)}"
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in UPSTREAM:
                problems += [f"{where} imports {a.name}" for a in node.names if a.name.startswith("_")]
            elif (
                isinstance(node, ast.Attribute)
                and node.attr.startswith("_")
                and not node.attr.startswith("__")
                and isinstance(node.value, ast.Call)
                and getattr(node.value.func, "id", None) == "super"
            ):
                problems.append(f"{where} calls super().{node.attr}")
            elif isinstance(node, ast.Attribute) and node.attr == "__globals__":
                problems.append(f"{where} reads __globals__")
    assert problems == []
