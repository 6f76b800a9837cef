"""``python -m sat_ext.smoke verl ...``: the same as ``sat-ext smoke verl ...``."""

import sys

from .cli import main

sys.exit(main())
