"""Text tools the mutation rules share: an edit, code masking, regular-expression sites
and balanced parentheses."""

from __future__ import annotations

import io
import itertools
import re
import tokenize
from collections.abc import Callable, Iterator
from dataclasses import dataclass

__all__ = ["Edit", "c_code", "call_argument", "python_code", "sites", "top_level_split", "typo"]


@dataclass(frozen=True, slots=True)
class Edit:
    """Replace ``source[start:end]`` by ``text``; ``helpers``: module-level code the new
    text needs (appended once, at the end of a Python module)."""

    start: int
    end: int
    text: str
    rule: str
    helpers: tuple[str, ...] = ()

    def apply(self, source: str) -> str:
        out = source[: self.start] + self.text + source[self.end :]
        if self.helpers:
            out = out.rstrip("\n") + "\n\n" + "\n".join(self.helpers) + "\n"
        return out


def c_code(source: str, directives: bool = True) -> str:
    """``source`` with its comments, string and character literals (and, with
    ``directives``, its preprocessor lines) blanked to spaces: offsets are kept, so a
    pattern found in it is found at the same place in ``source``."""
    out = list(source)
    i, n = 0, len(source)

    def blank(start: int, stop: int) -> None:
        for j in range(start, stop):
            if out[j] != "\n":
                out[j] = " "

    at_line_start = True
    while i < n:
        ch = source[i]
        if ch == "\n":
            at_line_start = True
            i += 1
            continue
        if at_line_start and ch == "#" and directives:
            end = i
            while end < n and (source[end] != "\n" or source[end - 1] == "\\"):
                end += 1
            blank(i, end)
            i = end
            continue
        if not ch.isspace():
            at_line_start = False
        if source.startswith("/*", i):
            end = source.find("*/", i + 2)
            end = n if end < 0 else end + 2
            blank(i, end)
            i = end
        elif source.startswith("//", i):
            end = source.find("\n", i)
            end = n if end < 0 else end
            blank(i, end)
            i = end
        elif ch in "\"'":
            end = i + 1
            while end < n and source[end] != ch:
                end += 2 if source[end] == "\\" else 1
            blank(i, min(end + 1, n))
            i = end + 1
        else:
            i += 1
    return "".join(out)


def python_code(source: str) -> str:
    """``source`` with its comments and string literals blanked (offsets kept)."""
    lines = source.splitlines(keepends=True)
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))
    out = list(source)
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    except (tokenize.TokenError, SyntaxError):
        return source
    for token in tokens:
        if token.type in (tokenize.COMMENT, tokenize.STRING):
            begin = starts[token.start[0] - 1] + token.start[1]
            stop = starts[token.end[0] - 1] + token.end[1]
            for j in range(begin, stop):
                if out[j] != "\n":
                    out[j] = " "
    return "".join(out)


def sites(code: str, pattern: str, rule: str,
          replace: Callable[[re.Match[str]], str | None], flags: int = 0) -> Iterator[Edit]:
    """An edit per match of ``pattern`` in ``code`` (a masked text: see :func:`c_code`)
    that ``replace`` gives a replacement for (None: no mutant there)."""
    for match in re.finditer(pattern, code, flags):
        text = replace(match)
        if text is not None and text != match.group(0):
            yield Edit(match.start(), match.end(), text, rule)


def call_argument(code: str, open_paren: int) -> int | None:
    """The offset of the parenthesis closing the one at ``open_paren`` (None: none)."""
    depth = 0
    for i in range(open_paren, len(code)):
        if code[i] in "([{":
            depth += 1
        elif code[i] in ")]}":
            depth -= 1
            if depth == 0:
                return i
        elif code[i] == ";" and depth:
            return None
    return None


def top_level_split(text: str, separator: str) -> list[str] | None:
    """``text`` split at ``separator`` outside brackets, in two at its last occurrence
    (None: it has none)."""
    depth, last = 0, -1
    i = 0
    while i < len(text):
        ch = text[i]
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif depth == 0 and text.startswith(separator, i):
            last = i
        i += 1
    if last < 0:
        return None
    return [text[:last], text[last + len(separator):]]


def typo(number: str) -> str | None:
    """A literal with its first two adjacent, different significant digits swapped, or
    (one such digit) ten times larger; None for zero."""
    mantissa, _, exponent = number.lower().partition("e")
    digits = [i for i, ch in enumerate(mantissa) if ch.isdigit()]
    significant = [i for i in digits if mantissa[i] != "0" or any(
        mantissa[j] != "0" for j in digits if j < i)]
    while significant and mantissa[significant[-1]] == "0" and "." in mantissa \
            and significant[-1] > mantissa.index("."):
        significant.pop()
    if not significant:
        return None
    for a, b in itertools.pairwise(significant):
        if mantissa[a] != mantissa[b]:
            chars = list(mantissa)
            chars[a], chars[b] = chars[b], chars[a]
            swapped = "".join(chars)
            return swapped + (f"e{exponent}" if exponent else "")
    power = int(exponent or 0) + 1
    return f"{mantissa}e{power}"
