"""Edit formats: whole files and search/replace blocks, exact then whitespace-tolerant."""

from __future__ import annotations

import pytest

from swarmfab.agents.llm.edits import EditError, SearchReplace, apply_blocks, parse_reply

SOURCE = """int f(int n)
{
    int s = 0;
    for (int i = 0; i < n; i++)
        s += i;
    return s;
}
"""


def block(search: str, replace: str) -> str:
    return f"<<<<<<< SEARCH\n{search}=======\n{replace}>>>>>>> REPLACE\n"


def test_search_replace_blocks_apply_in_order() -> None:
    reply = ("RATIONALE: closed form\n"
             + block("    int s = 0;\n", "    long s = 0;\n")
             + block("    return s;\n", "    return (int)s;\n"))
    parsed = parse_reply(reply)
    assert parsed.rationale == "closed form"
    assert parsed.format == "search-replace"
    result = apply_blocks(SOURCE, parsed.blocks)
    assert "    long s = 0;\n" in result and "    return (int)s;\n" in result
    assert result.count("\n") == SOURCE.count("\n")


def test_blocks_inside_a_fence_still_apply() -> None:
    reply = "```c\n" + block("    int s = 0;\n", "    int s = 1;\n") + "```\n"
    assert "int s = 1;" in apply_blocks(SOURCE, parse_reply(reply).blocks)


def test_whitespace_differences_are_tolerated() -> None:
    sloppy = "  int s = 0;   \n\tfor (int i = 0; i < n; i++)\n"
    result = apply_blocks(SOURCE, (SearchReplace(sloppy, "    int s = n * (n - 1) / 2;\n"),))
    assert "int s = n * (n - 1) / 2;\n        s += i;" in result


def test_a_block_that_matches_nowhere_says_where_the_nearest_lines_are() -> None:
    with pytest.raises(EditError) as caught:
        apply_blocks(SOURCE, (SearchReplace("    int s = 00;\n", "x\n"),
                              SearchReplace("nothing like it\n", "y\n")))
    message = str(caught.value)
    assert "block 1 of 2 does not match" in message
    assert "int s = 0;" in message and "line 3" in message


def test_an_ambiguous_block_is_refused() -> None:
    with pytest.raises(EditError, match="matches 2 places"):
        apply_blocks("a;\nb;\na;\n", (SearchReplace("a;\n", "c;\n"),))


def test_a_whole_file_in_a_fence() -> None:
    reply = "RATIONALE: rewrite\nHere it is:\n```c\nint f(int n) { return n; }\n```\nDone."
    parsed = parse_reply(reply)
    assert parsed.whole_file == "int f(int n) { return n; }\n"
    assert parsed.format == "whole-file"


@pytest.mark.parametrize(("reply", "says"), [
    ("", "empty"),
    ("   \n", "empty"),
    ("I would vectorise the loop.", "no edit"),
    ("<<<<<<< SEARCH\nint s = 0;\n>>>>>>> REPLACE\n", "malformed"),
])
def test_replies_without_an_applicable_edit(reply: str, says: str) -> None:
    with pytest.raises(EditError, match=says):
        parse_reply(reply)
