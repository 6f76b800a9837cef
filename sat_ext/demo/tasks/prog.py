"""The program task's language: a small, safe subset of Python expressions over tokens, with a conditional and a
bounded loop, interpreted by the package (no ``eval``, bounded size, steps, loop length and magnitude).

A program is a sequence of tokens (:data:`TOKENS`); consecutive digit tokens form one number::

    expr   := arith ['if' comp 'else' expr]                  Python's conditional expression
    comp   := arith ('<' | '>') arith                        one comparison (no chains)
    arith  := term (('+' | '-') term)*
    term   := factor ('*' factor)*
    factor := '-' factor | atom
    atom   := NUMBER | 'x' | 'y' | 'z' | 'i' | '(' expr ')'
            | 'sum' '(' expr 'for' 'i' 'in' 'range' '(' expr ')' ')'

``x``, ``y``, ``z`` are the inputs; ``i`` is the loop variable, bound only inside the element of a ``sum`` (the
``range`` argument is evaluated outside it, as in Python, so a nested ``sum`` may loop ``range(i)``). NUMBER is 1
to 3 digits without a leading zero (``0`` itself is allowed). Every program this module accepts is valid Python
with the same value (:func:`to_python` writes it; the tests check the two agree), e.g.
``x * 3 + 7 if x < y else sum(i * 2 + 1 for i in range(z))``.

The contract, each limit raising :class:`~sat_ext.demo.tasks.expr.ExprError` (the program then earns no reward):

- parsing: at most ``max_tokens`` tokens, ``max_nodes`` tree nodes and ``max_depth`` nested brackets /
  negations / conditionals / sums, so the recursive-descent parser's Python recursion is bounded;
- evaluation: at most ``max_steps`` node visits per input (a loop's element counts at every iteration, so nested
  loops are bounded too), ``range(n)`` with ``n <= max_range`` (``n < 0`` loops zero times, as Python's), and
  no intermediate value beyond ``max_abs`` in magnitude. The evaluator recurses over the tree, whose height is at
  most ``max_nodes``.

So whatever tokens a policy emits, parsing and running a program on one input costs at most about
``max_tokens + max_steps`` operations and can neither hang nor build a huge integer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence, Union

from .expr import ExprError

DIGITS = tuple("0123456789")
INPUTS = ("x", "y", "z")
LOOP_VAR = "i"
KEYWORDS = ("if", "else", "sum", "for", "in", "range")
OPERATORS = ("+", "-", "*", "<", ">", "(", ")")
TOKENS: tuple[str, ...] = DIGITS + INPUTS + (LOOP_VAR,) + OPERATORS + KEYWORDS
_MAX_DIGITS = 3


@dataclass(frozen=True)
class ProgLimits:
    """What a program may use: tokens, tree nodes, nesting depth, node visits per input, the longest ``range``,
    and the largest magnitude of any intermediate value."""

    max_tokens: int = 48
    max_nodes: int = 48
    max_depth: int = 8
    max_steps: int = 2_000
    max_range: int = 16
    max_abs: int = 10**6


@dataclass(frozen=True)
class Num:
    value: int


@dataclass(frozen=True)
class Name:
    name: str  # 'x', 'y', 'z' or 'i'


@dataclass(frozen=True)
class Neg:
    arg: "Node"


@dataclass(frozen=True)
class BinOp:
    op: str  # '+', '-' or '*'
    left: "Node"
    right: "Node"


@dataclass(frozen=True)
class Cond:
    """``then if left <op> right else other``."""

    op: str  # '<' or '>'
    left: "Node"
    right: "Node"
    then: "Node"
    other: "Node"


@dataclass(frozen=True)
class Sum:
    """``sum(body for i in range(count))``."""

    body: "Node"
    count: "Node"


Node = Union[Num, Name, Neg, BinOp, Cond, Sum]


class _Parser:
    """Recursive descent over one program's tokens, counting nodes and nesting depth."""

    def __init__(self, tokens: Sequence[str], limits: ProgLimits):
        self.toks = list(tokens)
        self.limits = limits
        self.pos = 0
        self.nodes = 0

    # -- helpers
    def _peek(self) -> str:
        return self.toks[self.pos] if self.pos < len(self.toks) else ""

    def _where(self) -> str:
        return f"{self._peek()!r} at token {self.pos}" if self._peek() else "the end"

    def _expect(self, tok: str) -> None:
        if self._peek() != tok:
            raise ExprError(f"expected {tok!r} but found {self._where()}")
        self.pos += 1

    def _node(self, node: Node) -> Node:
        self.nodes += 1
        if self.nodes > self.limits.max_nodes:
            raise ExprError(f"program has more than {self.limits.max_nodes} nodes")
        return node

    def _deeper(self, depth: int) -> int:
        if depth + 1 > self.limits.max_depth:
            raise ExprError(f"program nests deeper than {self.limits.max_depth}")
        return depth + 1

    # -- grammar
    def parse(self) -> Node:
        node = self._expr(0, 0)
        if self.pos != len(self.toks):
            raise ExprError(f"unexpected {self._where()}")
        return node

    def _expr(self, depth: int, loops: int) -> Node:
        node = self._arith(depth, loops)
        if self._peek() != "if":
            return node
        self.pos += 1
        inner = self._deeper(depth)
        left = self._arith(inner, loops)
        op = self._peek()
        if op not in ("<", ">"):
            raise ExprError(f"expected '<' or '>' but found {self._where()}")
        self.pos += 1
        right = self._arith(inner, loops)
        self._expect("else")
        other = self._expr(inner, loops)
        return self._node(Cond(op, left, right, node, other))

    def _arith(self, depth: int, loops: int) -> Node:
        node = self._term(depth, loops)
        while self._peek() in ("+", "-"):
            op = self._peek()
            self.pos += 1
            node = self._node(BinOp(op, node, self._term(depth, loops)))
        return node

    def _term(self, depth: int, loops: int) -> Node:
        node = self._factor(depth, loops)
        while self._peek() == "*":
            self.pos += 1
            node = self._node(BinOp("*", node, self._factor(depth, loops)))
        return node

    def _factor(self, depth: int, loops: int) -> Node:
        if self._peek() == "-":
            self.pos += 1
            return self._node(Neg(self._factor(self._deeper(depth), loops)))
        return self._atom(depth, loops)

    def _atom(self, depth: int, loops: int) -> Node:
        tok = self._peek()
        if tok in INPUTS:
            self.pos += 1
            return self._node(Name(tok))
        if tok == LOOP_VAR:
            if not loops:
                raise ExprError(f"'{LOOP_VAR}' outside a sum at token {self.pos}")
            self.pos += 1
            return self._node(Name(tok))
        if tok in DIGITS:
            start = self.pos
            while self._peek() in DIGITS:
                self.pos += 1
            digits = "".join(self.toks[start : self.pos])
            if len(digits) > _MAX_DIGITS:
                raise ExprError(f"number {digits} has more than {_MAX_DIGITS} digits")
            if len(digits) > 1 and digits[0] == "0":
                raise ExprError(f"number {digits} has a leading zero")
            return self._node(Num(int(digits)))
        if tok == "(":
            self.pos += 1
            node = self._expr(self._deeper(depth), loops)
            self._expect(")")
            return node
        if tok == "sum":
            self.pos += 1
            inner = self._deeper(depth)
            self._expect("(")
            body = self._expr(inner, loops + 1)
            for t in ("for", LOOP_VAR, "in", "range", "("):
                self._expect(t)
            count = self._expr(inner, loops)  # evaluated outside the loop, as Python's first iterable
            self._expect(")")
            self._expect(")")
            return self._node(Sum(body, count))
        raise ExprError(f"expected a number, a name, '-', '(' or 'sum' but found {self._where()}")


def parse(tokens: Sequence[str], limits: ProgLimits = ProgLimits()) -> Node:
    """The tree of the program ``tokens``; :class:`ExprError` if it is empty, malformed or over a size limit."""
    if not tokens:
        raise ExprError("empty program")
    if len(tokens) > limits.max_tokens:
        raise ExprError(f"program of {len(tokens)} tokens is longer than {limits.max_tokens}")
    bad = [t for t in tokens if t not in TOKENS]
    if bad:
        raise ExprError(f"token {bad[0]!r} is not in the language")
    return _Parser(tokens, limits).parse()


class _Evaluator:
    """One evaluation: counts node visits against ``max_steps`` and checks every value against ``max_abs``."""

    def __init__(self, limits: ProgLimits):
        self.limits = limits
        self.steps = 0

    def _check(self, value: int) -> int:
        if abs(value) > self.limits.max_abs:
            raise ExprError(f"intermediate value {value} exceeds {self.limits.max_abs} in magnitude")
        return value

    def run(self, node: Node, env: Mapping[str, int]) -> int:
        self.steps += 1
        if self.steps > self.limits.max_steps:
            raise ExprError(f"evaluation exceeds {self.limits.max_steps} steps")
        if isinstance(node, Num):
            return node.value
        if isinstance(node, Name):
            return env[node.name]
        if isinstance(node, Neg):
            return -self.run(node.arg, env)
        if isinstance(node, BinOp):
            a, b = self.run(node.left, env), self.run(node.right, env)
            return self._check(a + b if node.op == "+" else a - b if node.op == "-" else a * b)
        if isinstance(node, Cond):
            a, b = self.run(node.left, env), self.run(node.right, env)
            return self.run(node.then if (a < b if node.op == "<" else a > b) else node.other, env)
        n = self.run(node.count, env)
        if n > self.limits.max_range:
            raise ExprError(f"range({n}) is longer than {self.limits.max_range}")
        total = 0
        for i in range(max(n, 0)):
            total = self._check(total + self.run(node.body, {**env, LOOP_VAR: i}))
        return total


def evaluate(node: Node, inputs: Sequence[int], limits: ProgLimits = ProgLimits()) -> int:
    """The program's value at ``inputs`` = (x, y, z); :class:`ExprError` past a step, range or magnitude limit."""
    if len(inputs) != len(INPUTS):
        raise ValueError(f"expected {len(INPUTS)} inputs (x, y, z), got {len(inputs)}")
    return _Evaluator(limits).run(node, dict(zip(INPUTS, inputs)))


def run_program(
    tokens: Sequence[str], inputs: Sequence[Sequence[int]], limits: ProgLimits = ProgLimits()
) -> list[int | None]:
    """The program's value at every (x, y, z) of ``inputs``, ``None`` where that evaluation broke a limit;
    :class:`ExprError` if the program does not parse (then no input is run)."""
    tree = parse(tokens, limits)
    out: list[int | None] = []
    for xyz in inputs:
        try:
            out.append(evaluate(tree, xyz, limits))
        except ExprError:
            out.append(None)
    return out


def to_python(tokens: Sequence[str]) -> str:
    """The program as Python source: digit tokens joined into numbers, every other token spaced."""
    out: list[str] = []
    for tok in tokens:
        if out and tok in DIGITS and out[-1][-1] in DIGITS:
            out[-1] += tok
        else:
            out.append(tok)
    return " ".join(out)
