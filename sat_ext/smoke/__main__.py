"""``python -m sat_ext.smoke verl|openrlhf ...``: the same as ``sat-ext smoke verl|openrlhf ...``."""

import sys

from .cli import main

sys.exit(main())
