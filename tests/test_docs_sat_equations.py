"""docs/sat.md's table from the paper's equations to the code: every cited `path:line` holds the cited code.

A row cites `sat_ext/...py:N` in one cell and the code of line N (stripped, without a trailing comment) in
the last cell; a change that
moves or rewrites an equation's line fails here until the table is updated.
"""

import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[1]
ROW = re.compile(r"^\| (?P<paper>[^|]+) \|.*\| `(?P<path>sat_ext/[\w/]+\.py):(?P<line>\d+)` \| `(?P<code>.+)` \|$")


def _rows():
    return [m for line in (ROOT / "docs" / "sat.md").read_text().splitlines() if (m := ROW.match(line))]


def test_every_cited_line_holds_the_cited_code():
    rows = _rows()
    assert len(rows) >= 20, "docs/sat.md lost its equation table"
    for m in rows:
        lines = (ROOT / m["path"]).read_text().splitlines()
        n = int(m["line"])
        assert n <= len(lines), m.group(0)
        code = lines[n - 1].split("  # ")[0].strip()  # the line without its trailing comment
        assert code == m["code"], f"{m['path']}:{n} is now {code!r}, docs say {m['code']!r}"


def test_the_table_covers_eq_13_to_20_and_table_10():
    cited = set()
    for m in _rows():
        paper = m["paper"].strip()
        span = re.fullmatch(r"Eq\. (\d+)-(\d+)", paper)
        cited |= {f"Eq. {k}" for k in range(int(span[1]), int(span[2]) + 1)} if span else {paper}
    assert {f"Eq. {k}" for k in range(13, 21)} <= cited, cited
    assert {"Table 10", "Eq. 52"} <= cited
