"""The README is a user's guide: at most 170 lines, and every figure it states is a kept one (issue 38).

A figure is a decimal (0.013, 1.25x, 1.8e-04), a percentage, "N of N", a timing (147 s), a date, a time of day
or a commit hash, in the README's prose (code blocks, inline code and link targets are not prose). Each must
appear, as the same string, in a kept file that the same paragraph or list item links: a file under
benchmarks/results/ or benchmarks/README.md (a linked folder: any text file in it). A trailing "x" (times) is a
unit and need not be in the kept file, whose tables give the bare ratio.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
MAX_LINES = 170
KEPT_TEXT = {".md", ".csv", ".json", ".jsonl", ".txt", ".log"}

FIGURE = re.compile(
    r"""
    \b\d{4}-\d{2}-\d{2}\b                                   # a date
    | \b\d{1,2}:\d{2}\b                                      # a time of day
    | \b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{7,40}\b     # a commit hash
    | \b\d+\ of\ \d+\b                                       # N of N
    | \b\d+(?:\.\d+)?\ ?(?:ms|us|s|min|minutes|h|hours)\b     # a timing
    | (?:(?<=[\s(\[])|^)[+\-]\d+\.\d+(?:e[+\-]?\d+)?%?(?!\w|\.\d)  # a signed decimal
    | (?<![\w.\-+])\d+(?:\.\d+)?%                           # a percentage
    | (?<![\w.])\d+\.\d+(?:e[+\-]?\d+)?(?:x(?!\w)|(?!\w|\.\d))  # a decimal, not a version or part of a name
    """,
    re.X | re.M,
)
NOT_FIGURES = re.compile(r"arXiv[: ]\d{4}\.\d{4,5}")  # the paper's identifier
CODE_BLOCK = re.compile(r"^```.*?^```", re.S | re.M)
INLINE_CODE = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"\[([^\]]*)\]\(([^)\s]+)\)")


def paragraphs(text: str) -> list[str]:
    """Blank-line separated blocks of prose, list items apart; code blocks end a paragraph and are dropped."""
    text = CODE_BLOCK.sub("\n\n", text)
    out = []
    for block in re.split(r"\n\s*\n", text):
        out.extend(p.strip() for p in re.split(r"\n(?=\s*[*-] )", block) if p.strip())
    return out


def figures(paragraph: str) -> list[str]:
    """The figures a paragraph states, as written (a trailing "x" dropped)."""
    prose = NOT_FIGURES.sub(" ", LINK.sub(r"\1", INLINE_CODE.sub(" ", paragraph)))
    found = [m.group(0) for m in FIGURE.finditer(prose)]
    return [re.sub(r"(?<=\d)x$", "", f) for f in found]


def kept_files(paragraph: str, base: Path = ROOT) -> list[Path]:
    """The kept files a paragraph links: under benchmarks/results/, or benchmarks/README.md."""
    files = []
    for target in (m.group(2) for m in LINK.finditer(INLINE_CODE.sub(" ", paragraph))):
        path = (base / target.split("#", 1)[0]).resolve()
        rel = path.relative_to(ROOT) if path.is_relative_to(ROOT) else None
        if rel is None or not (rel.parts[:2] == ("benchmarks", "results") or rel == Path("benchmarks/README.md")):
            continue
        if path.is_dir():
            files.extend(sorted(p for p in path.rglob("*") if p.is_file() and p.suffix in KEPT_TEXT))
        elif path.is_file():
            files.append(path)
    return files


def stated_in(figure: str, text: str) -> bool:
    """The figure as a whole number in the text, not the head or tail of a longer one."""
    return re.search(rf"(?<![\d.]){re.escape(figure)}(?!\d|\.\d)", text) is not None


def unkept_figures(text: str, base: Path = ROOT) -> list[str]:
    """One line per figure that no kept file linked from its paragraph states."""
    bad = []
    for paragraph in paragraphs(text):
        stated = figures(paragraph)
        if not stated:
            continue
        kept = [p.read_text(errors="replace") for p in kept_files(paragraph, base)]
        for figure in stated:
            if not any(stated_in(figure, k) for k in kept):
                head = " ".join(paragraph.split())[:100]
                where = "no kept file linked" if not kept else "not in the kept files it links"
                bad.append(f"{figure!r} ({where}) in: {head}...")
    return bad


def test_the_readme_is_at_most_170_lines():
    lines = README.read_text().count("\n")
    assert lines <= MAX_LINES, f"README.md has {lines} lines, more than {MAX_LINES}: move detail to docs/"


def test_every_figure_in_the_readme_is_in_the_kept_file_it_links():
    bad = unkept_figures(README.read_text())
    assert not bad, "figures in README.md that their paragraph's kept files do not state:\n" + "\n".join(bad)


def test_the_readme_states_no_figure_on_lag_throughput():
    """bench_async is being re-measured: the README links it and docs/lag.md, and states none of its figures."""
    linking = [p for p in paragraphs(README.read_text()) if "bench_async" in p]
    assert linking, "README.md no longer links the lag-throughput results"
    for p in linking:
        assert not figures(p), f"a lag-throughput figure in README.md: {figures(p)} in {p!r}"


def test_the_figure_finder_finds_figures_and_only_figures():
    text = (
        "SAT costs 1.25x at 2K and -0.013 [-0.022, -0.005] over 5 seeds, 9.5% gated, 72 of 72 equal, "
        "147 s on 2026-12-06 at 09:07, core 5c91ddc, variance 1.8e-04, range 0.38-0.45."
    )
    assert figures(text) == [
        "1.25", "-0.013", "-0.022", "-0.005", "9.5%", "72 of 72", "147 s", "2026-12-06", "09:07", "5c91ddc",
        "1.8e-04", "0.38", "0.45",
    ]  # fmt: skip
    not_figures = (
        "arXiv 2607.18722 on verl 0.9.1, torch 2.13.0 and Qwen3-1.7B-Base, App. E.6, Eq. 14, lag 8, 26 variants, "
        "`--actor.eps_clip_low_high 0.2 0.2`, [a link](benchmarks/results/bench_loss_avx2_host/x.md)"
    )
    assert figures(not_figures) == []


def test_the_check_fails_on_a_figure_its_kept_file_does_not_state():
    """The checking function itself, on synthetic READMEs: it can fail, and it names the figure and paragraph."""
    kept = "[benchmarks/README.md](benchmarks/README.md)"
    good = f"At 2K tokens SAT takes 1.25x its peer's time ({kept}).\n"
    assert unkept_figures(good) == []
    wrong = f"At 2K tokens SAT takes 9.87x its peer's time ({kept}).\n"
    [line] = unkept_figures(wrong)
    assert "'9.87'" in line and "not in the kept files it links" in line and "At 2K tokens" in line
    unlinked = "At 2K tokens SAT takes 1.25x its peer's time.\n"
    [line] = unkept_figures(unlinked)
    assert "'1.25'" in line and "no kept file linked" in line
    elsewhere = f"At 2K tokens SAT takes 1.25x its peer's time.\n\nSee {kept}.\n"  # linked, but not here
    assert len(unkept_figures(elsewhere)) == 1
    not_kept = "SAT takes 1.25x ([docs/sat.md](docs/sat.md)).\n"  # docs/ is not where figures are kept
    assert len(unkept_figures(not_kept)) == 1


def test_a_figure_is_found_whole_not_as_part_of_a_longer_number():
    assert stated_in("1.25", "`sat` / `vanilla` 1.25 (2K)") and stated_in("1.25", "| 2K | 1.25 |")
    assert not stated_in("1.2", "1.25 and 1.26") and not stated_in("0.45", "10.45") and not stated_in("0.2", "0.2.1")
