"""tests/paper: sat_ext's defaults against an oracle written from the paper's text (_paper_eq.py).

No ``__init__.py`` (test files are ``test_paper_*``, helpers ``_paper_*``, unique basenames); the folder is
put on sys.path so that ``import _paper_eq`` works under any pytest import mode.
"""

import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
