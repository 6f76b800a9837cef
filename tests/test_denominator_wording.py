"""The rollout log-prob as SAT's ratio denominator is App. E.6's variant; the paper's reported runs divide by the
trainer-side log-prob at the rollout checkpoint (Table 9, docs/sat.md). No docstring or doc paragraph that names
the rollout log-prob as the reference may call it the paper's setting."""

import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[1]
ROLLOUT = re.compile(r"rollout[ _-]?log[ _-]?probs?|old := rollout", re.I)
NEAR = 120  # characters either side of "paper's setting"
PAPERS_SETTING = re.compile(r"(?<!SAT )paper's setting", re.I)


def _paragraphs(text: str):
    """Blank-line separated blocks, and within them list items ("- ...")."""
    for block in re.split(r"\n\s*\n", text):
        yield from re.split(r"\n\s*(?=- )", block)


def _claims(paragraph: str):
    text = " ".join(paragraph.split())
    for m in PAPERS_SETTING.finditer(text):
        window = text[max(0, m.start() - NEAR) : m.end() + NEAR]
        if ROLLOUT.search(window):
            yield window


def test_the_rollout_denominator_is_never_called_the_papers_setting():
    files = [*ROOT.joinpath("sat_ext").rglob("*.py"), *ROOT.joinpath("docs").glob("*.md"), ROOT / "README.md"]
    bad = [
        f"{path.relative_to(ROOT)}: ...{claim}..."
        for path in files
        for p in _paragraphs(path.read_text())
        for claim in _claims(p)
    ]
    assert not bad, "\n".join(bad)
