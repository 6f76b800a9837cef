"""A small expression language for the code task, interpreted safely: no ``eval``, bounded size and steps.

A program is one integer expression in the variable ``x``::

    expr   := term (('+' | '-') term)*
    term   := factor ('*' factor)*
    factor := '-' factor | atom
    atom   := NUMBER | 'x' | '(' expr ')'          NUMBER: 1 to 3 decimal digits

e.g. ``2*x+1``, ``x+x+1``, ``(x+3)*2``. Evaluation is integer arithmetic. Every limit is checked and raises
:class:`ExprError` (the program then earns no reward): the text's length, the nesting depth, the number of
nodes, the steps of one evaluation (one per node visited) and the magnitude of every intermediate value.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence, Union


class ExprError(ValueError):
    """A program that does not parse, or exceeds a limit while parsing or evaluating."""


@dataclass(frozen=True)
class Limits:
    """What a program may use: characters, parenthesis depth, parse-tree nodes, evaluation steps per input, and
    the largest absolute value of any intermediate result."""

    max_len: int = 32
    max_depth: int = 8
    max_nodes: int = 32
    max_steps: int = 64
    max_abs: int = 10**6


@dataclass(frozen=True)
class Num:
    value: int


@dataclass(frozen=True)
class Var:
    pass


@dataclass(frozen=True)
class Neg:
    arg: "Node"


@dataclass(frozen=True)
class BinOp:
    op: str  # '+', '-' or '*'
    left: "Node"
    right: "Node"


Node = Union[Num, Var, Neg, BinOp]
_MAX_DIGITS = 3
_DIGITS = frozenset("0123456789")  # not str.isdigit: that accepts other scripts' digits


class _Parser:
    """Recursive descent over the characters of one program, counting depth and nodes as it goes."""

    def __init__(self, text: str, limits: Limits):
        self.text = text
        self.limits = limits
        self.pos = 0
        self.nodes = 0

    def parse(self) -> Node:
        node = self._expr(0)
        if self.pos != len(self.text):
            raise ExprError(f"unexpected {self.text[self.pos]!r} at position {self.pos} of {self.text!r}")
        return node

    def _node(self, node: Node) -> Node:
        self.nodes += 1
        if self.nodes > self.limits.max_nodes:
            raise ExprError(f"program {self.text!r} has more than {self.limits.max_nodes} nodes")
        return node

    def _peek(self) -> str:
        return self.text[self.pos] if self.pos < len(self.text) else ""

    def _expr(self, depth: int) -> Node:
        node = self._term(depth)
        while self._peek() in ("+", "-"):
            op = self._peek()
            self.pos += 1
            node = self._node(BinOp(op, node, self._term(depth)))
        return node

    def _term(self, depth: int) -> Node:
        node = self._factor(depth)
        while self._peek() == "*":
            self.pos += 1
            node = self._node(BinOp("*", node, self._factor(depth)))
        return node

    def _factor(self, depth: int) -> Node:
        if self._peek() == "-":
            self.pos += 1
            if depth + 1 > self.limits.max_depth:
                raise ExprError(f"program {self.text!r} nests deeper than {self.limits.max_depth}")
            return self._node(Neg(self._factor(depth + 1)))
        return self._atom(depth)

    def _atom(self, depth: int) -> Node:
        c = self._peek()
        if c == "x":
            self.pos += 1
            return self._node(Var())
        if c in _DIGITS:
            start = self.pos
            while self._peek() in _DIGITS:
                self.pos += 1
            digits = self.text[start : self.pos]
            if len(digits) > _MAX_DIGITS:
                raise ExprError(f"number {digits!r} in {self.text!r} has more than {_MAX_DIGITS} digits")
            return self._node(Num(int(digits)))
        if c == "(":
            if depth + 1 > self.limits.max_depth:
                raise ExprError(f"program {self.text!r} nests deeper than {self.limits.max_depth}")
            self.pos += 1
            node = self._expr(depth + 1)
            if self._peek() != ")":
                raise ExprError(f"missing ')' at position {self.pos} of {self.text!r}")
            self.pos += 1
            return node
        where = f"{c!r} at position {self.pos}" if c else "the end"
        raise ExprError(f"expected a number, 'x', '-' or '(' but found {where} of {self.text!r}")


def parse(text: str, limits: Limits = Limits()) -> Node:
    """The parse tree of ``text``; :class:`ExprError` if it is empty, malformed or over a size limit."""
    if not text:
        raise ExprError("empty program")
    if len(text) > limits.max_len:
        raise ExprError(f"program of {len(text)} characters is longer than {limits.max_len}")
    return _Parser(text, limits).parse()


def evaluate(node: Node, x: int, limits: Limits = Limits()) -> int:
    """The program's value at ``x``, visiting at most ``limits.max_steps`` nodes and never holding a value
    larger than ``limits.max_abs`` in magnitude (iterative: no Python recursion on program input)."""
    steps = 0
    # An explicit stack of (node, children evaluated?) and a stack of values.
    todo: list[tuple[Node, bool]] = [(node, False)]
    values: list[int] = []
    while todo:
        cur, ready = todo.pop()
        if not ready:
            steps += 1
            if steps > limits.max_steps:
                raise ExprError(f"evaluation exceeds {limits.max_steps} steps")
            if isinstance(cur, Num):
                values.append(cur.value)
            elif isinstance(cur, Var):
                values.append(x)
            elif isinstance(cur, Neg):
                todo += [(cur, True), (cur.arg, False)]
            else:
                todo += [(cur, True), (cur.right, False), (cur.left, False)]
            continue
        if isinstance(cur, Neg):
            out = -values.pop()
        else:
            right, left = values.pop(), values.pop()
            out = left + right if cur.op == "+" else left - right if cur.op == "-" else left * right
        if abs(out) > limits.max_abs:
            raise ExprError(f"intermediate value {out} exceeds {limits.max_abs} in magnitude")
        values.append(out)
    (result,) = values
    if abs(result) > limits.max_abs:
        raise ExprError(f"value {result} exceeds {limits.max_abs} in magnitude")
    return result


def run_program(text: str, xs: Sequence[int], limits: Limits = Limits()) -> list[int]:
    """The program's value at every input of ``xs``; :class:`ExprError` as :func:`parse` / :func:`evaluate`."""
    tree = parse(text, limits)
    return [evaluate(tree, x, limits) for x in xs]
