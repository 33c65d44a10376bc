"""Turning a model's reply into a new source file: whole files or search/replace blocks.

A reply either carries SEARCH/REPLACE blocks::

    <<<<<<< SEARCH
    lines copied from the current file
    =======
    the lines that replace them
    >>>>>>> REPLACE

or one fenced code block holding the whole new file. Blocks are applied in order, each
to the result of the previous one: an exact match first, then a match that ignores
leading and trailing whitespace on every line. A block that matches nowhere, or in
more than one place, is an :class:`EditError` whose message is written for the model:
it says which block failed and shows the nearest lines of the file, so the next turn
can fix the block instead of guessing.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass

__all__ = ["EditError", "ParsedReply", "SearchReplace", "apply_blocks", "parse_reply"]

_BLOCK = re.compile(
    r"^[ \t]*<{5,9} ?SEARCH[^\n]*\n(.*?)^[ \t]*={5,9}[ \t]*\n(.*?)^[ \t]*>{5,9} ?REPLACE[^\n]*$",
    re.S | re.M,
)
_FENCE = re.compile(r"^[ \t]*```[\w+.-]*[ \t]*\n(.*?)^[ \t]*```[ \t]*$", re.S | re.M)
_RATIONALE = re.compile(r"^\s*(?:\*\*)?rationale(?:\*\*)?\s*:\s*(.+)$", re.I | re.M)
_MARKER = re.compile(r"^[ \t]*(<{5,9} ?SEARCH|={5,9}[ \t]*$|>{5,9} ?REPLACE)", re.M)


class EditError(ValueError):
    """The reply cannot be turned into a file; the message is shown to the model."""


@dataclass(frozen=True, slots=True)
class SearchReplace:
    search: str
    replace: str


@dataclass(frozen=True, slots=True)
class ParsedReply:
    """A reply's edit: either ``blocks`` or a ``whole_file``, plus its one-line rationale."""

    rationale: str
    blocks: tuple[SearchReplace, ...] = ()
    whole_file: str | None = None

    @property
    def format(self) -> str:
        return "search-replace" if self.blocks else "whole-file"


def parse_reply(text: str) -> ParsedReply:
    """Find the edit in a reply; EditError when there is none or it is malformed."""
    if not text.strip():
        raise EditError("the reply was empty: answer with SEARCH/REPLACE blocks or one "
                        "fenced code block holding the whole file")
    rationale = _rationale(text)
    blocks = tuple(SearchReplace(m.group(1), m.group(2)) for m in _BLOCK.finditer(text))
    if blocks:
        return ParsedReply(rationale, blocks=blocks)
    if _MARKER.search(text):
        raise EditError("a SEARCH/REPLACE block is malformed: each needs a line "
                        "'<<<<<<< SEARCH', the lines to find, a line '=======', the new "
                        "lines, and a line '>>>>>>> REPLACE'")
    fenced = [m.group(1) for m in _FENCE.finditer(text)]
    if not fenced:
        raise EditError("the reply holds no edit: no SEARCH/REPLACE block and no fenced "
                        "code block (```c ... ```) with the whole file")
    return ParsedReply(rationale, whole_file=max(fenced, key=len))


def _rationale(text: str) -> str:
    found = _RATIONALE.search(text)
    if found:
        return found.group(1).strip()[:200]
    for line in text.splitlines():
        if line.strip() and not line.lstrip().startswith(("```", "<<<<<<<")):
            return line.strip()[:200]
    return ""


def apply_blocks(source: str, blocks: tuple[SearchReplace, ...]) -> str:
    """Apply blocks in order (exact, then whitespace-tolerant); EditError names the block."""
    for number, block in enumerate(blocks, 1):
        source = _apply_one(source, block, number, len(blocks))
    return source


def _apply_one(source: str, block: SearchReplace, number: int, total: int) -> str:
    where = f"SEARCH/REPLACE block {number} of {total}"
    if not block.search.strip():
        raise EditError(f"{where} has an empty SEARCH part: copy the lines to replace")
    count = source.count(block.search)
    if count == 1:
        return source.replace(block.search, block.replace, 1)
    if count > 1:
        raise EditError(f"{where} matches {count} places: add surrounding lines to the "
                        "SEARCH part so it matches exactly one")
    lines, wanted = source.splitlines(keepends=True), _stripped(block.search.splitlines())
    starts = [i for i in range(len(lines) - len(wanted) + 1)
              if _stripped(lines[i:i + len(wanted)]) == wanted]
    if len(starts) > 1:
        raise EditError(f"{where} matches {len(starts)} places (ignoring whitespace): add "
                        "surrounding lines to the SEARCH part so it matches exactly one")
    if not starts:
        raise EditError(f"{where} does not match the file. {_nearest(lines, wanted)}")
    start = starts[0]
    replacement = block.replace
    if replacement and not replacement.endswith("\n"):
        replacement += "\n"
    return "".join([*lines[:start], replacement, *lines[start + len(wanted):]])


def _stripped(lines: list[str]) -> list[str]:
    """Lines without surrounding whitespace, blank lines at either end dropped."""
    out = [line.strip() for line in lines]
    while out and not out[0]:
        out.pop(0)
    while out and not out[-1]:
        out.pop()
    return out


def _nearest(lines: list[str], wanted: list[str]) -> str:
    """A hint for the model: the file's lines closest to the first line it looked for."""
    if not wanted:
        return ""
    stripped = [line.strip() for line in lines]
    close = difflib.get_close_matches(wanted[0], stripped, n=1, cutoff=0.5)
    if not close:
        return (f"Its first line {wanted[0]!r} is nowhere in the file; copy the SEARCH "
                "lines verbatim from the current source.")
    index = stripped.index(close[0])
    excerpt = "".join(lines[max(0, index - 2): index + len(wanted) + 2])
    return (f"Its first line {wanted[0]!r} is not in the file; the nearest lines "
            f"(line {index + 1}) are:\n{excerpt}")
