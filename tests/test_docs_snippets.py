"""Every Python example in docs/ runs as written (each ```python block of each page, in order, in one namespace
per page)."""

import pathlib
import re

import pytest

DOCS = pathlib.Path(__file__).resolve().parents[1] / "docs"
PAGES = sorted(p for p in DOCS.rglob("*.md") if "```python" in p.read_text())


def test_the_pages_with_examples_are_found():
    assert {p.name for p in PAGES} >= {"sat.md", "lag.md"}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(DOCS)))
def test_doc_python_examples_run(page: pathlib.Path):
    namespace: dict = {}
    for code in re.findall(r"```python\n(.*?)```", page.read_text(), flags=re.S):
        exec(compile(code, str(page), "exec"), namespace)
