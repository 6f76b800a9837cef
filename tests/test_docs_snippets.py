"""The Python examples in docs/sat.md run as written."""

import pathlib
import re

DOC = pathlib.Path(__file__).resolve().parents[1] / "docs" / "sat.md"


def test_sat_doc_snippets_run():
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)
    assert blocks, "docs/sat.md lost its code example"
    for code in blocks:
        exec(compile(code, str(DOC), "exec"), {})
