"""Interpreter-start hook of sat_ext's OpenRLHF CPU setup (sat_ext/openrlhf/cpu/__init__.py).

This folder is on ``PYTHONPATH`` only in the processes of a ``sat-ext smoke openrlhf`` CPU run; there, with
``SAT_EXT_OPENRLHF_CPU=1``, every Python process (the CLI, each Ray worker, each vLLM process) activates it.
"""

import os

if os.environ.get("SAT_EXT_OPENRLHF_CPU") == "1":
    from sat_ext.openrlhf.cpu import activate

    activate()
