"""docs/sat.md's table from the paper's equations to the code: every row's code is one line of the cited file.

A row cites `sat_ext/...py` (and, where the line carries one, its equation marker, `# Eq. 14`: a comment on
that line that contains the marker's text) in one cell and the code of the line (stripped, without its trailing
comment) in the last cell. Rewriting a cited line, or dropping its marker, fails here until the table is
updated; moving it does not (no line numbers).
"""

import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[1]
ROW = re.compile(
    r"^\| (?P<paper>[^|]+) \|.*\| `(?P<path>sat_ext/[\w/]+\.py)`(?:, `# (?P<marker>[^`]+)`)? \| "
    r"`(?P<code>.+)` \|$"
)


def _rows():
    return [m for line in (ROOT / "docs" / "sat.md").read_text().splitlines() if (m := ROW.match(line))]


def test_every_cited_line_holds_the_cited_code_and_its_marker():
    rows = _rows()
    assert len(rows) >= 20, "docs/sat.md lost its equation table"
    for m in rows:
        lines = [line.split("  # ", 1) for line in (ROOT / m["path"]).read_text().splitlines()]
        hits = [parts for parts in lines if parts[0].strip() == m["code"]]
        assert len(hits) == 1, f"{m['path']} holds {len(hits)} lines with {m['code']!r}, not one"
        if m["marker"]:
            comment = hits[0][1] if len(hits[0]) > 1 else ""
            assert m["marker"] in comment, f"{m['path']}: {m['code']!r} lost its marker # {m['marker']}"


def test_the_markers_cover_eq_13_to_20():
    marked = set()
    for m in _rows():
        if m["marker"] and (span := re.fullmatch(r"Eq\. (\d+)-(\d+)", m["marker"])):
            marked |= {f"Eq. {k}" for k in range(int(span[1]), int(span[2]) + 1)}
        elif m["marker"]:
            marked.add(m["marker"])
    assert {f"Eq. {k}" for k in range(13, 21)} <= marked, marked


def test_the_table_covers_eq_13_to_20_and_table_10():
    cited = set()
    for m in _rows():
        paper = m["paper"].strip()
        span = re.fullmatch(r"Eq\. (\d+)-(\d+)", paper)
        cited |= {f"Eq. {k}" for k in range(int(span[1]), int(span[2]) + 1)} if span else {paper}
    assert {f"Eq. {k}" for k in range(13, 21)} <= cited, cited
    assert {"Table 10", "Eq. 52"} <= cited
