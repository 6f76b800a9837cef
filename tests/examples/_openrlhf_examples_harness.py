"""Runs each OpenRLHF example command through sat_ext's launcher and OpenRLHF's real CLI, stopped at train().

``python _openrlhf_examples_harness.py IN.json OUT.json``: IN maps a case name to the argv that
examples/openrlhf_aime_qwen3_30b/run.sh passes after ``python -m sat_ext.openrlhf.train_ppo_ray``. Each
case runs ``sat_ext.openrlhf.train_ppo_ray.main(argv)``, which runs OpenRLHF 0.11.2's own
``openrlhf.cli.train_ppo_ray`` module (its parser and all of its validation) with the launcher's SAT
extension; one more extension, last in line, records the final arguments where the module calls
``train(args)`` and stops there. A fresh process, because OpenRLHF's CLI module imports vllm, deepspeed and
flash_attn at module level: tests/openrlhf/_openrlhf_stubs.py stands in for those three only (names, no
behaviour); OpenRLHF itself and the launcher are real.
"""

import contextlib
import io
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "openrlhf"))

import _openrlhf_stubs  # noqa: E402
from _openrlhf_cli import Stop, plain  # noqa: E402

_openrlhf_stubs.install()

from sat_ext.openrlhf import train_ppo_ray as launcher  # noqa: E402


def _record(args):
    raise Stop(args)


RECORD = launcher.Extension("record", (), lambda parser: None, _record, lambda: None)


def main(in_path, out_path):
    with open(in_path) as f:
        cases = json.load(f)
    results = {}
    for name, argv in cases.items():
        out, err = io.StringIO(), io.StringIO()
        result = {}
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                launcher.main(argv, extensions=(*launcher.EXTENSIONS, RECORD))
            result["outcome"] = "returned"
        except Stop as stop:
            result.update(outcome="train", args=plain(stop.args[0]))
        except SystemExit as e:
            result.update(outcome="exit", code=e.code)
        result.update(stdout=out.getvalue()[-4000:], stderr=err.getvalue()[-4000:])
        results[name] = result
    with open(out_path, "w") as f:
        json.dump(results, f)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
