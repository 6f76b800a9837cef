"""The AIME examples' reward: App. F's rule-based math verifier, on Hugging Face's ``math-verify``.

App. F: "the rule-based PrimeMath verifier with multi-pattern answer extraction, Hendrycks-MATH normalization,
and SymPy equivalence checking". PrimeMath is not public; this is the same recipe on ``math-verify`` 0.9.0
(``pip install 'sat-ext[math]'``):

* extraction: the last ``Answer: ...`` line (DAPO's prompt asks for it) when it comes after the last
  ``\\boxed{}``; otherwise math-verify's patterns on the response's last ``TAIL_CHARS`` characters:
  ``\\boxed{}`` first, then "final answer is ...", ``answer: ...``, the last LaTeX environment, the last
  plain number or expression;
* normalisation: math-verify's LaTeX normalisation (``\\text``, units, ``\\left``/``\\right``, ``\\dfrac``,
  malformed operators, thousands separators, percent), the MATH-style clean-up;
* equivalence: SymPy (``math_verify.verify``): ``\\frac{1}{2}`` = ``0.5``, ``x = 3`` = ``3``, intervals, sets,
  radicals, matrices;
* a time limit per answer (``TIME_LIMIT_S``): each answer is judged in a worker process whose own timer stops
  the judgement at the limit, and which is killed ``KILL_GRACE_S`` later if it has not answered (SymPy can sit
  in C code that no signal interrupts). It also makes the verifier work where verl and OpenRLHF call it, in
  threads, where math-verify's own ``signal.alarm`` timeouts raise.

Contract: 1.0 if the response's final answer equals one of the reference answers, else 0.0 (no answer,
unparsable, over the time limit, any garbage): a response never raises. A reference that holds no answer is a
data error and raises ``ValueError`` naming it.

Two entry points, one judgement:

* verl: ``reward.custom_reward_function.path=pkg://sat_ext.examples.math_reward`` with ``name=compute_score``
  (verl 0.9.1's ``compute_score(data_source, solution_str, ground_truth, extra_info=None)``); a row's other
  accepted answers may be listed in ``extra_info["answers"]`` (the data script writes them for Dolci rows with
  several answers);
* OpenRLHF: ``--reward.remote_url <file with reward_func>`` (``reward_func(queries, prompts, labels)``; a label
  is one answer or a list of them).

Rewards are 0 / 1 (verl's ``math_dapo`` gives -1 / +1): GRPO's group-normalised advantages are the same for
both, and the logged mean is the accuracy. ``SAT_EXT_MATH_WORKERS`` sets the worker processes per calling
process (default 1: one core each; verl already runs 8 reward workers, and on 2 cores 1 was the faster).
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import queue
import re
import select
import signal
import subprocess
import sys
import threading
from typing import Any, Iterable

TIME_LIMIT_S = 5.0  # per answer: extraction, parsing and every comparison together
KILL_GRACE_S = 1.0  # a worker that has not answered TIME_LIMIT_S + this after the request is killed
TAIL_CHARS = 2000  # the final answer is looked for in the response's last characters
WORKERS_ENV = "SAT_EXT_MATH_WORKERS"
DEFAULT_WORKERS = 1  # verl runs reward.num_workers (8) reward workers, each with its own pool

RIGHT, WRONG, TIMEOUT, ERROR = "right", "wrong", "timeout", "error"

_SPECIAL = re.compile(r"<\|[^|>\n]{0,64}\|>|</s>|<eos>|<pad>")  # OpenRLHF decodes with special tokens
_ANSWER_LINE = re.compile(r"answer\s*:[ \t]*([^\n]*)", re.IGNORECASE)
_LATEX_DELIMITED = re.compile(r"\$|\\\(|\\\[|\\boxed")


# ------------------------------------------------------------------------------------------ the judgement


def response_tail(response: str) -> str:
    """The response's last ``TAIL_CHARS`` characters, without special tokens."""
    return _SPECIAL.sub("", response[-4 * TAIL_CHARS :])[-TAIL_CHARS:]


def answer_candidates(response: str) -> list[str]:
    """The texts math-verify parses, in order, until one yields an answer: the last ``Answer:`` line (as
    ``$...$`` unless it has its own LaTeX delimiters) if it comes after the last ``\\boxed``, else the tail from
    the last ``\\boxed``; then the whole tail."""
    tail = response_tail(response)
    lines = [m for m in _ANSWER_LINE.finditer(tail) if m.group(1).strip()]
    boxed = tail.rfind("\\boxed")
    if lines and lines[-1].start() > boxed:
        text = lines[-1].group(1).strip().strip("*").strip().rstrip(".").strip()
        return [text if _LATEX_DELIMITED.search(text) else f"${text}$", text, tail]
    # from the last \boxed on: math-verify's own boxed pattern starts at the first \boxed of its input
    return [tail[boxed:], tail] if boxed >= 0 else [tail]


def _parse_gold(answer: str) -> list:
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse

    text = answer.strip()
    if _LATEX_DELIMITED.search(text):
        return parse(text, [LatexExtractionConfig(), ExprExtractionConfig()], parsing_timeout=None)
    return parse(f"\\boxed{{{text}}}", [LatexExtractionConfig()], parsing_timeout=None) or parse(
        text, [ExprExtractionConfig()], parsing_timeout=None
    )


def _parse_prediction(response: str) -> list:
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse

    targets = [LatexExtractionConfig(boxed_match_priority=0), ExprExtractionConfig()]
    for text in answer_candidates(response):
        parsed = parse(text, targets, parsing_timeout=None)
        if parsed:
            return parsed
    return []


def judge(response: str, answers: tuple[str, ...]) -> bool:
    """True if the response's final answer equals one of ``answers`` (SymPy equivalence). No time limit here:
    :func:`verdict` adds it."""
    from math_verify import verify

    pred = _parse_prediction(response)
    if not pred:
        return False
    return any(gold and verify(gold, pred, timeout_seconds=None) for gold in map(_parse_gold, answers))


class _Deadline(BaseException):
    """Raised by the timer inside a judgement (a BaseException, so SymPy's and math-verify's handlers let it by)."""


def _raise_deadline(signum, frame):
    raise _Deadline


def judge_with_deadline(response: str, answers: tuple[str, ...], limit_s: float) -> str:
    """:func:`judge` as RIGHT / WRONG / TIMEOUT / ERROR, stopped by a timer after ``limit_s`` (the timer needs the
    main thread; elsewhere the judgement runs unbounded)."""
    timed = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGALRM, _raise_deadline) if timed else None
    try:
        if timed:
            signal.setitimer(signal.ITIMER_REAL, limit_s)
        return RIGHT if judge(response, answers) else WRONG
    except _Deadline:
        return TIMEOUT
    except Exception:  # garbage that math-verify or SymPy did not catch themselves
        return ERROR
    finally:
        if timed:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)


# -------------------------------------------------------------------------------------- worker processes


def serve(stdin=None, stdout=None) -> None:
    """A worker's loop (``python -m sat_ext.examples.math_reward``): one JSON request ``[response, answers,
    limit_s]`` per input line, one verdict per output line, until the input closes."""
    stdin, stdout = stdin or sys.stdin, stdout or sys.stdout
    logging.getLogger("math_verify").setLevel(logging.ERROR)  # its "timeout disabled" note: the timer is ours
    import math_verify  # noqa: F401  (loaded before the first request, not during it)

    for line in stdin:
        try:
            response, answers, limit_s = json.loads(line)
            reply = judge_with_deadline(str(response), tuple(map(str, answers)), float(limit_s))
        except (ValueError, TypeError):
            reply = ERROR
        stdout.write(reply + "\n")
        stdout.flush()


class _Worker:
    """One ``serve`` process, spoken to over its stdin / stdout (a fresh interpreter: nothing of the caller's
    ``__main__`` is re-run, unlike multiprocessing's spawn)."""

    def __init__(self):
        self.process = subprocess.Popen(
            [sys.executable, "-m", __spec__.name if __spec__ else "sat_ext.examples.math_reward"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            encoding="utf-8",
            errors="surrogatepass",
        )

    def ask(self, request: list, wait_s: float) -> str | None:
        """The worker's verdict, or None if it gave none within ``wait_s`` (or died)."""
        try:
            self.process.stdin.write(json.dumps(request) + "\n")
            self.process.stdin.flush()
            ready, _, _ = select.select([self.process.stdout], [], [], wait_s)
            reply = self.process.stdout.readline().strip() if ready else ""
        except (OSError, ValueError):
            return None
        return reply if reply in (RIGHT, WRONG, TIMEOUT, ERROR) else None

    def kill(self) -> None:
        self.process.kill()
        self.process.wait()
        for stream in (self.process.stdin, self.process.stdout):
            try:
                stream.close()
            except OSError:
                pass


class VerifierPool:
    """Up to ``size`` worker processes (started on demand), each judging one answer at a time; a worker that
    overruns its answer's limit by ``KILL_GRACE_S`` is killed and replaced."""

    def __init__(self, size: int, limit_s: float = TIME_LIMIT_S):
        if size < 1:
            raise ValueError(f"VerifierPool size must be >= 1, got {size}")
        if not limit_s > 0:
            raise ValueError(f"VerifierPool limit_s must be > 0, got {limit_s}")
        self.limit_s = limit_s
        self._slots = threading.BoundedSemaphore(size)
        self._idle: queue.SimpleQueue[_Worker] = queue.SimpleQueue()

    def verdict(self, response: str, answers: tuple[str, ...]) -> str:
        with self._slots:
            try:
                worker = self._idle.get_nowait()
            except queue.Empty:
                worker = _Worker()
            reply = worker.ask([response, list(answers), self.limit_s], self.limit_s + KILL_GRACE_S)
            if reply is None:
                worker.kill()
                return TIMEOUT
            self._idle.put(worker)
            return reply

    def close(self) -> None:
        while True:
            try:
                self._idle.get_nowait().kill()
            except queue.Empty:
                return


_pool: VerifierPool | None = None
_pool_lock = threading.Lock()


def _workers_from_env() -> int:
    raw = os.environ.get(WORKERS_ENV, str(DEFAULT_WORKERS))
    try:
        size = int(raw)
    except ValueError:
        size = 0
    if size < 1:
        raise ValueError(f"{WORKERS_ENV}={raw!r}: must be a positive integer (worker processes per caller)")
    return size


def _shared_pool() -> VerifierPool:
    global _pool
    with _pool_lock:
        if _pool is None:
            if importlib.util.find_spec("math_verify") is None:
                raise ImportError(
                    "sat_ext.examples.math_reward needs math-verify: pip install 'sat-ext[math]' (math-verify==0.9.0)"
                )
            _pool = VerifierPool(_workers_from_env())
        return _pool


def _forget_pool() -> None:  # a forked child must not share its parent's workers
    global _pool
    _pool = None


os.register_at_fork(after_in_child=_forget_pool)


def verdict(response: str, answers: tuple[str, ...]) -> str:
    """RIGHT / WRONG / TIMEOUT / ERROR for one response, judged by the shared worker pool within the time limit."""
    return _shared_pool().verdict(response_tail(response), answers)


# ----------------------------------------------------------------------------------------- entry points


def _flat(value: Any) -> Iterable[Any]:
    if hasattr(value, "tolist") and not isinstance(value, str):  # numpy arrays from parquet
        value = value.tolist()
    if isinstance(value, (list, tuple)):
        for item in value:
            yield from _flat(item)
    elif value is not None:
        yield value


def reference_answers(ground_truth: Any, extra_info: Any = None, where: str = "ground_truth") -> tuple[str, ...]:
    """The accepted answers: ``ground_truth`` (one or a list) plus ``extra_info["answers"]``; none is an error."""
    found = list(_flat(ground_truth))
    if isinstance(extra_info, dict):
        found += list(_flat(extra_info.get("answers")))
    answers = tuple(dict.fromkeys(s for s in (str(a).strip() for a in found) if s))
    if not answers:
        raise ValueError(f"{where} {ground_truth!r} holds no answer to compare with")
    return answers


def compute_score(
    data_source: str, solution_str: str, ground_truth: Any, extra_info: dict | None = None, **_: Any
) -> float:
    """verl's custom reward function: 1.0 if ``solution_str``'s final answer equals a reference answer, else 0.0."""
    answers = reference_answers(ground_truth, extra_info, where=f"ground_truth of a {data_source!r} row")
    return 1.0 if verdict(str(solution_str), answers) == RIGHT else 0.0


def reward_func(queries: list[str], prompts: list[str], labels: list[Any], **_: Any) -> dict:
    """OpenRLHF's reward hook (``--reward.remote_url``): the response is the query after its prompt; rewards 0 / 1,
    so ``eval_<datasource>_pass1`` is the accuracy averaged over the samples."""
    acc = []
    for query, prompt, label in zip(queries, prompts, labels, strict=True):
        response = query[len(prompt) :] if query.startswith(prompt) else query
        acc.append(1.0 if verdict(response, reference_answers(label, where="label")) == RIGHT else 0.0)
    if len(acc) == 1:
        return {"rewards": acc[0], "scores": acc[0], "extra_logs": {"acc": acc[0]}}
    return {"rewards": acc, "scores": acc, "extra_logs": {"acc": acc}}


if __name__ == "__main__":
    serve()
