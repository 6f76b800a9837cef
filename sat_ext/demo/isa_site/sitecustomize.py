"""Interpreter-start hook of the demo's instruction-set cap (sat_ext/demo/isa.py).

This folder is on ``PYTHONPATH`` only in the processes a capped demo run's vLLM engine starts; there, under
``ATEN_CPU_CAPABILITY=avx2`` (or ``default``), ``torch.cpu``'s AVX512 / AMX probes answer False before vLLM
picks its kernels.
"""

import os

if os.environ.get("ATEN_CPU_CAPABILITY"):
    from sat_ext.demo.isa import cap_probes_in_this_process

    cap_probes_in_this_process()
