"""tests/core: reference tests of the framework-free SAT core (sat_ext.core).

There is deliberately no ``__init__.py`` here (a ``core`` package could shadow other modules); test files are
named ``test_core_*`` and helpers ``_core_*`` so that their basenames are unique in the tree. The helper
folder is put on sys.path so that ``import _core_ref`` works under any pytest import mode (and in the
processes that torch.multiprocessing spawns, which inherit sys.path).
"""

import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
