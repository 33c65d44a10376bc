"""Mutation operators: a fixed catalogue of the mistakes a hurried optimiser makes,
applied to a kernel's source text to measure how much of them verification catches.

Each :class:`Operator` is one class of mistake (an off-by-one in a loop bound, a clamp
dropped, a scratch buffer shared between threads, ...) with a short description; its
:meth:`Operator.mutants` yields every :class:`Mutant` of a source where it fits: one
site changed, the rest of the text as it was. Operators read C (the C templates and
champions) and Python (a delta-rule ``forward`` file, a problem file's ``ModelNew``).
Pure text: nothing here builds, imports or runs a mutant.

A mutant is meant to stay a candidate that builds and loads: the rewrites keep the
syntax, and a Python rewrite that needs a helper (a lazy tensor subclass, a shared
buffer) appends it to the module. One that fails to build anyway is killed trivially;
:func:`parses` tells a Python one in advance.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from swarmfab.verify import _mutate_c as c_rules
from swarmfab.verify import _mutate_py as py_rules
from swarmfab.verify._mutate_text import Edit

__all__ = ["CATALOGUE", "Mutant", "Operator", "language_of", "mutants_of", "operator", "parses"]


@dataclass(frozen=True, slots=True)
class Mutant:
    """One site of one operator changed in a source text."""

    operator: str  # the operator's (class's) name
    rule: str  # which of its rewrites, in words
    language: str  # "c" or "python"
    line: int  # 1-based line of the site in the original text
    before: str  # the text replaced
    after: str  # what replaced it
    source: str  # the whole mutated text

    @property
    def site(self) -> str:
        """Where and what, in one line: ``line 12: 'i < n' -> 'i <= n'``."""
        return f"line {self.line}: {_short(self.before)!r} -> {_short(self.after)!r}"


@dataclass(frozen=True, slots=True)
class Operator:
    """A class of mutation: its name, what it models, and its rewrites per language."""

    name: str
    description: str
    c: Callable[[str], Iterator[Edit]] | None = None
    python: Callable[[str], Iterator[Edit]] | None = None

    @property
    def languages(self) -> tuple[str, ...]:
        return tuple(lang for lang, rules in (("c", self.c), ("python", self.python)) if rules)

    def mutants(self, source: str, language: str) -> Iterator[Mutant]:
        """Every mutant of ``source`` (C or Python) this operator makes, in site order;
        two sites that give the same text give one mutant."""
        rules = self.c if language == "c" else self.python if language == "python" else None
        if rules is None:
            return
        seen: set[str] = set()
        for edit in rules(source):
            text = edit.apply(source)
            if text == source or text in seen:
                continue
            seen.add(text)
            yield Mutant(self.name, edit.rule, language, source.count("\n", 0, edit.start) + 1,
                         source[edit.start:edit.end], edit.text, text)


CATALOGUE: tuple[Operator, ...] = (
    Operator("loop-bound",
             "A loop bound or tile edge off: `<` for `<=`, one iteration short, the last "
             "partial tile or chunk dropped or assumed full, a slice one short.",
             c_rules.loop_bound, py_rules.loop_bound),
    Operator("dropped-clamp",
             "A clamp or range guard removed: the gate floor, exp's lower clamp, a span "
             "or renormalisation limit, torch clamp/maximum/minimum/nan_to_num.",
             c_rules.dropped_clamp, py_rules.dropped_clamp),
    Operator("missing-max",
             "An exponential without its anchor: exp(a - b) split into exp(a) / exp(b), "
             "softmax and logsumexp without the row maximum, tanh and sigmoid written "
             "through a raw exp.",
             c_rules.missing_max, py_rules.missing_max),
    Operator("shared-scratch",
             "Scratch shared where it must be private, or a synchronisation dropped: a "
             "per-thread workspace made static, a worksharing or barrier pragma removed, "
             "a buffer (or the output) reused across calls.",
             c_rules.shared_scratch, py_rules.shared_scratch),
    Operator("contiguity",
             "Inputs assumed contiguous: read through their storage with contiguous "
             "strides (as a kernel given data_ptr() does), or reshaped with view().",
             None, py_rules.contiguity),
    Operator("in-place-update",
             "A parameter or an input changed in place: parameters nudged on every call "
             "or rounded once, an input used as scratch and left changed.",
             None, py_rules.in_place_update),
    Operator("lower-precision",
             "A step in lower precision: an intermediate or the result through bfloat16, "
             "exp's polynomial truncated or its range reduction coarsened, an "
             "accumulator rounded to half precision.",
             c_rules.lower_precision, py_rules.lower_precision),
    Operator("lazy-result",
             "A result that is not a final plain tensor at return: a subclass computing "
             "on first read, a subclass at all, or one a thread fills in after return.",
             None, py_rules.lazy_result),
    Operator("special-values",
             "Special values special-cased away: beta kept off 0 and 1, gates kept off 0, "
             "-inf gates read as 0, the gate floor raised, inputs clamped to the range "
             "randn draws, zeros replaced, all-zero rows skipped.",
             c_rules.special_values, py_rules.special_values),
    Operator("index-stride",
             "An index or stride wrong: the grouped-value head map hv / (HV / H) read as "
             "hv % H, token and head order swapped, heads tiled instead of repeated, a "
             "transpose dropped, a reduction over the neighbouring axis.",
             c_rules.index_stride, py_rules.index_stride),
    Operator("sign-flip",
             "A sign flipped: a - b as a + b, -= as +=, a negation dropped.",
             c_rules.sign_flip, py_rules.sign_flip),
    Operator("constant",
             "A constant mistyped: two adjacent digits swapped, or a one-digit constant "
             "ten times too large.",
             c_rules.constant, py_rules.constant),
    Operator("dropped-term",
             "A term left out: an accumulation (+=) skipped, the right operand of a sum "
             "dropped.",
             c_rules.dropped_term, py_rules.dropped_term),
)


def operator(name: str) -> Operator:
    """The catalogue's operator called ``name``."""
    for op in CATALOGUE:
        if op.name == name:
            return op
    raise KeyError(f"no mutation operator {name!r}; known: "
                   f"{', '.join(op.name for op in CATALOGUE)}")


def language_of(backend: str) -> str | None:
    """The language a backend's sources are written in, for the operators: "c" for C,
    "python" for Python and problem-file (torch-module) candidates; None otherwise."""
    return {"c": "c", "python": "python", "torch-module": "python"}.get(backend)


def mutants_of(source: str, language: str,
               operators: tuple[Operator, ...] = CATALOGUE) -> Iterator[Mutant]:
    """Every mutant of ``source`` by every operator, operator by operator."""
    for op in operators:
        yield from op.mutants(source, language)


def parses(mutant: Mutant) -> bool:
    """Whether a Python mutant is valid Python (C is left to its compiler)."""
    if mutant.language != "python":
        return True
    try:
        ast.parse(mutant.source)
    except SyntaxError:
        return False
    return True


def _short(text: str, limit: int = 70) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."
