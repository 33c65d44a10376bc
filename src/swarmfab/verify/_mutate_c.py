"""The mutation rules for C sources, one function per operator of
:data:`swarmfab.verify.mutants.CATALOGUE`: each yields an :class:`Edit` per site.

Patterns are matched in the code only (comments, literals and, except where a rule is
about pragmas or defines, preprocessor lines blanked), so a comment is never mutated.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from swarmfab.verify._mutate_text import (
    Edit,
    c_code,
    call_argument,
    sites,
    top_level_split,
    typo,
)

__all__ = ["constant", "dropped_clamp", "dropped_term", "index_stride", "loop_bound",
           "lower_precision", "missing_max", "shared_scratch", "sign_flip", "special_values"]

_OPERAND = r"[\w\->\.\[\]]+"
_FLOAT = (r"(?<![\w.])(?P<num>\d+\.\d*(?:[eE][+-]?\d+)?|\d+[eE][+-]?\d+|\.\d+(?:[eE][+-]?\d+)?)"
          r"(?P<suffix>[fF]?)(?![\w.])")


def _for_headers(code: str) -> Iterator[tuple[int, list[tuple[int, int]]]]:
    """Every ``for (init; cond; step)``: the offset of its '(' and the spans of its three
    clauses (empty clauses included)."""
    for match in re.finditer(r"\bfor\s*\(", code):
        open_paren = match.end() - 1
        close = _closing(code, open_paren)
        if close is None:
            continue
        spans, start, depth = [], open_paren + 1, 0
        for i in range(open_paren + 1, close):
            if code[i] in "([{":
                depth += 1
            elif code[i] in ")]}":
                depth -= 1
            elif code[i] == ";" and depth == 0:
                spans.append((start, i))
                start = i + 1
        spans.append((start, close))
        if len(spans) == 3:
            yield open_paren, spans


def _closing(code: str, open_paren: int) -> int | None:
    depth = 0
    for i in range(open_paren, len(code)):
        if code[i] == "(":
            depth += 1
        elif code[i] == ")":
            depth -= 1
            if depth == 0:
                return i
    return None


def _strip_span(code: str, start: int, end: int) -> tuple[int, int]:
    while start < end and code[start].isspace():
        start += 1
    while end > start and code[end - 1].isspace():
        end -= 1
    return start, end


def loop_bound(source: str) -> Iterator[Edit]:
    code = c_code(source)
    for _, (_, cond, step) in _for_headers(code):
        start, end = _strip_span(code, *cond)
        text = source[start:end]
        parts = re.fullmatch(r"(?P<v>[^<>=!&|?]+?)\s*(?P<op><=?)\s*(?P<e>[^<>=!&|?]+)", text)
        if parts is None:
            continue
        var, op, bound = parts.group("v"), parts.group("op"), parts.group("e")
        if op == "<":
            yield Edit(start, end, f"{var} <= {bound}", "< -> <= (one iteration too many)")
            yield Edit(start, end, f"{var} < {bound} - 1", "< N -> < N - 1 (one short)")
        else:
            yield Edit(start, end, f"{var} < {bound}", "<= -> < (one short)")
        stride = re.fullmatch(rf"\s*{re.escape(var)}\s*\+=\s*(?P<s>[^;]+?)\s*",
                              source[step[0]:step[1]])
        if op == "<" and stride is not None and stride.group("s") != "1":
            yield Edit(start, end, f"{var} + {stride.group('s')} <= {bound}",
                       "the last partial tile dropped")
    # the last tile's width, min(rest, tile), taken as the whole tile
    pattern = (rf"(?P<x>{_OPERAND}(?:\s*[-+]\s*{_OPERAND})?)\s*<\s*(?P<y>{_OPERAND})\s*\?\s*"
               r"(?P=x)\s*:\s*(?P=y)")
    yield from sites(code, pattern, "the last partial tile assumed whole",
                     lambda m: m.group("y"))


def _calls(code: str, names: str) -> Iterator[tuple[int, int, int, str]]:
    """Calls of the functions matching ``names`` (not their definitions): (start of the
    name, '(' offset, ')' offset, the function's name)."""
    for match in re.finditer(rf"\b(?P<f>{names})\s*\(", code):
        open_paren = match.end() - 1
        close = call_argument(code, open_paren)
        if close is None:
            continue
        inner = code[open_paren + 1:close].strip()
        if re.match(r"(const\s+)?[A-Za-z_]\w*\s+\**\s*[A-Za-z_]\w*\s*(,|$)", inner):
            continue  # a definition or a declaration: its parameters
        yield match.start(), open_paren, close, match.group("f")


def dropped_clamp(source: str) -> Iterator[Edit]:
    code = c_code(source)
    for start, open_paren, close, _ in _calls(code, "delta_floor_gate"):
        yield Edit(start, close + 1, source[open_paren:close + 1], "gate floor not applied")
    yield from sites(code, r"(?P<u>\w+)\.i \^= \((?P=u)\.i \^ \w+\) & (?P<mask>\w+);",
                     "a clamp on the bits removed", lambda m: f"(void){m.group('mask')};")
    yield from sites(code, r"(?P<op>[<>])\s*(?P<limit>[A-Z][A-Z0-9_]*_LIMIT)\b",
                     "a range guard never taken", lambda m: f"{m.group('op')} 1e30f")
    for start, open_paren, close, _ in _calls(code, "fminf|fmaxf|fmin|fmax"):
        first = top_level_split(source[open_paren + 1:close], ",")
        if first is not None:
            yield Edit(start, close + 1, f"({first[0].strip()})", "fmin/fmax removed")


def missing_max(source: str) -> Iterator[Edit]:
    code = c_code(source)
    for start, open_paren, close, name in _calls(code, "delta_exp|delta_exp_in_range|expf|exp"):
        parts = top_level_split(source[open_paren + 1:close], " - ")
        if parts is None or not parts[0].strip():
            continue
        left, right = parts[0].strip(), parts[1].strip()
        yield Edit(start, close + 1, f"({name}({left}) / {name}({right}))",
                   "exp(a - b) split into exp(a) / exp(b)")


def shared_scratch(source: str) -> Iterator[Edit]:
    for match in re.finditer(r"^[ \t]*#pragma omp (?:barrier|for\b|atomic|critical)[^\n]*$",
                             source, re.MULTILINE):
        kind = match.group(0).split()[2]
        yield Edit(match.start(), match.end(), "", f"#pragma omp {kind} removed")
    declaration = re.compile(
        r"^[ \t]*#pragma omp parallel(?! for)[^\n]*\n[ \t]*\{\n[ \t]*(?P<decl>"
        r"(?P<type>[A-Za-z_]\w*(?:\s+[A-Za-z_]\w*)*?)\s*(?P<ptr>\*?)\s*(?P<name>\w+)"
        r"(?:\s*=\s*(?P<init>[^;]+))?;)", re.MULTILINE)
    for match in declaration.finditer(source):
        kind, ptr, name, init = (match.group(g) for g in ("type", "ptr", "name", "init"))
        variable = f"{kind} {ptr}{name}"
        if init is None:
            text = f"static {variable};"
        elif init.lstrip().startswith("{"):
            text = f"static {variable} = {init};"
        else:
            text = f"static {variable}; {name} = {init};"
        yield Edit(match.start("decl"), match.end("decl"), text,
                   "per-thread scratch made static (shared by the threads)")
    code = c_code(source, directives=False)
    yield from sites(code, r"\s*\b(?:first)?private\([^)]*\)", "private(...) dropped",
                     lambda m: "")
    yield from sites(code, r"\bomp_get_thread_num\(\)", "every thread on slot 0",
                     lambda m: "0")


def lower_precision(source: str) -> Iterator[Edit]:
    code = c_code(source)
    for match in re.finditer(r"(?P<p>\b\w+) = (?P=p) \* \w+ \+ (?P<c>[0-9.eE+-]+f?);", code):
        yield Edit(match.start(), match.end(), f"{match.group('p')} = {match.group('c')};",
                   "polynomial truncated (higher terms dropped)")
    yield from sites(code, r"(?P<keep>- (?P<n>\w+) \* [0-9.]+f?) \+ (?P=n) \* [0-9.eE+-]+f?",
                     "range reduction in one part (the low part dropped)",
                     lambda m: m.group("keep"))
    floats = set(re.findall(r"\bfloat\b[^;(){}]*?\b(\w+)\s*(?:\[|=|;|,)", code))
    floats |= set(re.findall(r"\bfloat\s+\*?\s*(?:restrict\s+)?(\w+)", code))
    for match in re.finditer(r"(?m)(?<=[;{}\n)])(?P<ws>[ \t]*)(?P<lhs>[\w\->\.\[\]]+) \+= "
                             r"(?P<rhs>[^;]+);", code):
        base = re.match(r"\w+", match.group("lhs"))
        if base is None or base.group(0) not in floats or "\n" in match.group("rhs"):
            continue
        lhs = match.group("lhs")
        yield Edit(match.start("lhs"), match.end(),
                   f"{lhs} = (float)(_Float16)({lhs} + ({match.group('rhs')}));",
                   "accumulator rounded to half precision")


def special_values(source: str) -> Iterator[Edit]:
    code = c_code(source)
    yield from sites(code, r"0xC1F00000u", "gate floor raised from -30 to -5",
                     lambda m: "0xC0A00000u")
    yield from sites(code, r"\ba->beta\[(?P<i>[^\]]+)\]", "beta kept within [1e-4, 1 - 1e-4]",
                     lambda m: f"fminf(fmaxf({m.group(0)}, 1e-4f), 1.0f - 1e-4f)")
    gates = [(start, close + 1) for start, _, close, _ in _calls(code, "delta_gate")]
    gates += [m.span() for m in re.finditer(r"\bgt\[DELTA_SCALAR_GATE \? 0 : \w+\]", code)]
    for start, end in gates:
        gate = source[start:end]
        yield Edit(start, end, f"fminf({gate}, -1e-4f)", "gates kept below -1e-4 (never 0)")
        yield Edit(start, end,
                   f"({{ union {{ float f; uint32_t u; }} g_ = {{ .f = {gate} }}; "
                   "g_.u == 0xff800000u ? 0.0f : g_.f; })", "-inf gates read as 0")


def index_stride(source: str) -> Iterator[Edit]:
    code = c_code(source)
    yield from sites(code, r"\b(?P<hv>\w+) / \(a->HV / a->H\)",
                     "GVA head map hv / (HV / H) read as hv % H",
                     lambda m: f"{m.group('hv')} % a->H")
    yield from sites(code, r"\((?P<b>\w+) \* (?P<T>(?:a->)?T) \+ (?P<t>[^()]+?)\) \* "
                     r"a->(?P<h>HV|H) \+ (?P<hv>\w+)\b", "token and head order swapped",
                     lambda m: f"(({m.group('b')} * a->{m.group('h')} + {m.group('hv')}) "
                               f"* {m.group('T')} + {m.group('t')})")
    yield from sites(code, r"\b(?P<r>row) \* a->(?P<h>HV|H) \+ (?P<hv>\w+)\b",
                     "token and head order swapped",
                     lambda m: f"({m.group('hv')} * a->B * a->T + {m.group('r')})")
    yield from sites(code, r"\b(?P<d>\w+) \* V \+ v0 \+ (?P<j>\w+)\b",
                     "state read value-major (strides swapped)",
                     lambda m: f"(v0 + {m.group('j')}) * K + {m.group('d')}")


def sign_flip(source: str) -> Iterator[Edit]:
    code = c_code(source)
    yield from sites(code, r"(?<=[\w\])]) - (?=[\w(])", "a - b -> a + b", lambda m: " + ")
    yield from sites(code, r"-=", "-= -> +=", lambda m: "+=")
    yield from sites(code, r"\*= -(?=\w)", "*= -x -> *= x", lambda m: "*= ")


def constant(source: str) -> Iterator[Edit]:
    code = c_code(source, directives=False)
    for match in re.finditer(_FLOAT, code):
        line_start = code.rfind("\n", 0, match.start()) + 1
        if source[line_start:match.start()].lstrip().startswith(("#if", "#elif")):
            continue
        mistyped = typo(match.group("num"))
        if mistyped is not None:
            yield Edit(match.start(), match.end(), mistyped + match.group("suffix"),
                       "constant mistyped")


def dropped_term(source: str) -> Iterator[Edit]:
    code = c_code(source)
    for match in re.finditer(r"(?m)(?<=[;{}\n)])(?P<ws>[ \t]*)(?P<lhs>[\w\->\.\[\]]+) \+= "
                             r"(?P<rhs>[^;]+);", code):
        yield Edit(match.start("lhs"), match.end(), "(void)0;", "an accumulation skipped")
    for match in re.finditer(r"(?m)(?<=[;{}\n)])[ \t]*(?:(?:const )?\w+(?: \*)? )?"
                             r"(?P<lhs>[\w\->\.\[\]]+) = (?P<rhs>[^;]+);", code):
        rhs = match.group("rhs")
        parts = top_level_split(rhs, " + ")
        if parts is None or "?" in rhs or not parts[0].strip():
            continue
        yield Edit(match.start("rhs"), match.end("rhs"), parts[0].rstrip(),
                   "the last term of a sum dropped")
