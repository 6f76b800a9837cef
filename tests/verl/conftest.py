"""tests/verl: make the helper modules importable under any pytest import mode.

There is deliberately no ``__init__.py`` in this folder: as a package it would be named ``verl`` and could
shadow the real verl. Test files are named ``test_verl_*`` so that their basenames are unique in the tree.
"""

import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
