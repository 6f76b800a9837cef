"""docs/lag.md's bash example prints valid overrides (its Python example runs in tests/test_docs_snippets.py)."""

from __future__ import annotations

import pathlib
import re

DOC = pathlib.Path(__file__).resolve().parents[2] / "docs" / "lag.md"


def test_lag_doc_bash_example_uses_the_real_helper():
    [bash] = [b for b in re.findall(r"```bash\n(.*?)```", DOC.read_text(), flags=re.S) if "verl_overrides" in b]
    code = re.search(r'python -c "(.*?)"\)', bash, flags=re.S).group(1).replace("\\\n", "")
    namespace: dict = {}
    exec(code.replace("print(", "result = (", 1), namespace)
    words = namespace["result"].split()
    assert "trainer.v1.trainer_mode=sat_separate_async" in words and "trainer.test_freq=1" in words
    assert "trainer.v1.separate_async.num_warmup_batches=0.125" in words  # one batch of 256 ahead
