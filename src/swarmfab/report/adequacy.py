"""Mutation adequacy for a person: the table per tier and per class that ``swarmfab
corpus adequacy`` prints and ``swarmfab report`` shows again, from the stored summary
(:meth:`swarmfab.evaluation.adequacy.Adequacy.summary`)."""

from __future__ import annotations

from typing import Any

from rich.table import Table

__all__ = ["adequacy_line", "adequacy_notes", "adequacy_table", "measurement_key"]


def measurement_key(workload: str) -> str:
    """The store's measurement key of a workload's latest adequacy summary."""
    name = workload.rsplit("/", 1)[-1]
    return f"adequacy {name.removesuffix('.py')}"


def _cell(killed: int, score: dict[str, Any]) -> str:
    total = score["non_equivalent"]
    return f"{killed}/{total} ({100 * killed / total:.0f}%)" if total else "-"


def adequacy_table(summary: dict[str, Any], half: str = "scoring") -> Table:
    """Per class: mutants judged, equivalent, and the share of the others killed by the
    fast corpus before and after growth, by the battery and by both tiers together."""
    table = Table(title=f"{summary['workload']}: mutation adequacy, {half} half "
                        f"(seed {summary['seed']}, at most {summary['max_per_class']} per "
                        "class)", title_justify="left")
    for column in ("class", "mutants", "equivalent", "fast corpus", "fast, grown",
                   "battery", "both tiers", "battery misses", "no build", "same binary"):
        table.add_column(column, justify="left" if column == "class" else "right")
    for name, score in summary["scores"][half].items():
        table.add_row(name, str(score["mutants"]), str(score["equivalent"]),
                      _cell(score["killed_fast"], score), _cell(score["killed_grown"], score),
                      _cell(score["killed_battery"], score), _cell(score["killed_either"], score),
                      str(score["battery_misses"]), str(score["no_build"]),
                      str(score["same_binary"]), end_section=name == "dropped-term")
    return table


def adequacy_line(summary: dict[str, Any]) -> str:
    """One line: the scoring half's battery and grown-corpus shares, and when."""
    total = summary["scores"]["scoring"]["all"]
    if not total["non_equivalent"]:
        return f"mutation adequacy ({summary['started']}): no mutant judged"
    return (f"mutation adequacy ({summary['started']}, scoring half, "
            f"{total['non_equivalent']} non-equivalent mutants): battery "
            f"{_cell(total['killed_battery'], total)}, fast corpus after growth "
            f"{_cell(total['killed_grown'], total)} (before {_cell(total['killed_fast'], total)})")


def adequacy_notes(summary: dict[str, Any]) -> list[str]:
    """The lines under the table: kernels, growth, equivalents, misses, what was left out."""
    lines = [f"kernels: {', '.join(s['label'] for s in summary['subjects'])}"]
    lines += [f"left out: {s['label']}: {s['why']}" for s in summary["left_out"]]
    grown = sorted({g["case"] for g in summary["grown"]})
    lines.append(f"fast corpus: {summary['corpus_before']} cases before, "
                 f"{len(grown)} grown: {', '.join(grown) or 'none'}")
    for entry in summary["equivalent"]:
        if entry["why"] != "compiles to the original's very binary":
            lines.append(f"equivalent ({entry['half']}): {entry['operator']} "
                         f"{entry['rule']}, {entry['subject']}, {entry['site']}: {entry['why']}")
    for entry in summary["battery_misses"]:
        lines.append(f"battery miss ({entry['half']}): {entry['operator']} {entry['rule']}, "
                     f"{entry['subject']}, {entry['site']}: killed by "
                     f"{entry['killed_beyond_by']!r}")
    lines += [f"beyond case left out: {c['case']}: {c['why']}"
              for c in summary["beyond_left_out"]]
    if summary["stopped"]:
        lines.append(f"stopped early: {summary['stopped']}")
    return lines
