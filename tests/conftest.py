"""One sys.path hook for the whole suite, under any pytest import mode: each test folder's helper modules
(``_core_ref``, ``_verl_helpers``, ...; their basenames are unique in the tree) and the scripts under benchmarks/ and
tools/ import by name. The test folders have no ``__init__.py`` on purpose: ``tests/verl`` as a package would be
named ``verl`` and shadow the real one."""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for folder in (ROOT / "benchmarks", ROOT / "tools", *sorted(p for p in Path(__file__).parent.iterdir() if p.is_dir())):
    if folder.name != "__pycache__" and str(folder) not in sys.path:
        sys.path.insert(0, str(folder))
