"""What an LLM agent is told: its role, the rules, the edit format, and the feedback.

Every text here is plain data rendered from the context, so tests can read exactly what
a model is shown. The packer (``packer.py``) decides how much of each section fits.
"""

from __future__ import annotations

import difflib
import inspect
import sys

from swarmfab.records import Candidate, Status, Verdict

__all__ = [
    "EDIT_FORMAT",
    "REVIEW_SYSTEM",
    "ROLE_FOCUS",
    "describe_verdict",
    "repair_message",
    "review_message",
    "system_prompt",
    "workload_notes",
]

ROLE_FOCUS: dict[str, str] = {
    "memory-layout": "the memory layout: how the state and inputs are laid out and walked "
                     "(contiguity, strides, alignment, transposed copies of the state, "
                     "prefetching), so every pass streams through cache lines",
    "tiling": "tiling and blocking: tile shapes that keep the working set in L1/L2, register "
              "blocking of the inner loops, loop order",
    "vectorisation": "vectorisation: loops the compiler turns into SIMD (AVX2/AVX-512 via "
                     "`#pragma omp simd`, intrinsics from <immintrin.h> behind #ifdef "
                     "guards), FMA, vector reductions, no scalar tails on the hot path",
    "algorithm": "the algorithm: a different but exact formulation of the same maths "
                 "(for instance a chunked form, fewer passes over the state, decays "
                 "computed once), within float32 accuracy",
    "fusion": "fusion: doing several passes over the state in one sweep, keeping "
              "intermediates in registers, fewer loads and stores per token",
    "parallelism": "parallelism: how work is split across threads (OpenMP schedule, "
                   "granularity, false sharing, per-thread scratch), at the goal's "
                   "thread count",
}

EDIT_FORMAT = """\
Reply with one line `RATIONALE: <what you changed and why it is faster>`, then the edit,
in one of two forms:

1. SEARCH/REPLACE blocks (preferred for small changes). Each block copies lines from the
   current file verbatim and gives their replacement:

<<<<<<< SEARCH
the exact lines to find (enough of them to match one place only)
=======
the new lines
>>>>>>> REPLACE

2. The whole new file, in one fenced code block (```c ... ```).

Nothing else is applied: text outside the blocks is ignored."""

RULES = """\
Rules (the verifier enforces them; a breach is rejected and recorded):
- Keep the entry point's name, signature and return convention exactly as they are.
- Compute every output for every input: results are compared with a float64 reference
  on a growing corpus and on fresh random inputs, including edge cases (tails, grouped
  heads, an initial state or none, strong decay).
- Deterministic, no memoisation across calls, inputs never modified, outputs written
  before returning, no threads or processes left running, no files, no network.
- Never try to detect the benchmark or the verifier: such code is rejected, and a
  reviewer reads every winning diff."""

REVIEW_SYSTEM = """\
You review a change to a performance kernel that was verified and timed faster. You look
for benchmark gaming only: caching results across calls, detecting test inputs or
buffer addresses, skipping work for particular shapes or values, reading the clock or
the environment, leaving work running after return, lowering precision to pass a loose
tolerance. Genuine optimisations (vectorisation, tiling, reordering, fusion) are fine.
Answer with a first line `VERDICT: SUSPICIOUS` or `VERDICT: CLEAN`, then at most five
short lines of reasons."""


_LANGUAGES = {
    "c": "C kernel (compiled with gcc, OpenMP available)",
    "torch-module": ("PyTorch module (`class ModelNew`, built with Model's constructor "
                     "arguments and given Model's weights by name (keep every parameter and "
                     "buffer name); it may compile C++/OpenMP with "
                     "torch.utils.cpp_extension.load_inline, and its first call may prepare "
                     "a fast path)"),
}


def system_prompt(role: str, backend: str) -> str:
    """The standing instructions of one role."""
    focus = ROLE_FOCUS.get(role, role)
    language = _LANGUAGES.get(backend, f"{backend} kernel")
    return (f"You are a performance engineer who optimises one {language}. Your "
            f"domain is {focus}. Propose one focused change per reply that makes the "
            f"kernel faster on the target shapes while keeping it exactly correct.\n\n"
            f"{RULES}\n\n{EDIT_FORMAT}")


def workload_notes(workload: object) -> str:
    """The workload's own description and the docstrings that define its layouts and ABI."""
    parts = [str(getattr(workload, "description", "") or "")]
    seen: set[str] = set()
    for cls in type(workload).__mro__:
        module = sys.modules.get(cls.__module__)
        doc = inspect.getdoc(module) if module is not None else None
        if doc and cls.__module__ not in seen and "_base" not in cls.__module__:
            seen.add(cls.__module__)
            parts.append(doc)
    return "\n\n".join(part for part in parts if part)


def describe_verdict(verdict: Verdict, max_diagnostics: int = 8) -> list[str]:
    """The lines of feedback a verdict gives: status, reason, compiler errors, failing case."""
    lines = [f"status: {verdict.status.value}", f"reason: {verdict.reason}"]
    if verdict.status is Status.BUILD_FAILED and verdict.diagnostics:
        lines.append("compiler errors:")
        lines += [f"  {d[:300]}" for d in verdict.diagnostics[:max_diagnostics]]
    failed = verdict.failed_check
    if failed is not None:
        figures = ""
        if failed.rms_ratio is not None:
            figures = f" (rms error ratio {failed.rms_ratio:.3g}"
            if failed.max_abs_ratio is not None:
                figures += f", max-abs ratio {failed.max_abs_ratio:.3g}"
            figures += ")"
        lines.append(f"failing case: {failed.case}; check: {failed.check}; "
                     f"{failed.detail}{figures}")
    for timing in verdict.timings:
        lines.append(f"{timing.shape}: {timing.ratio.inverted().median:.2f}x vs "
                     f"{timing.incumbent} ({timing.comparison})")
    return lines


def repair_message(problem: str, feedback: list[str], source: str, filename: str,
                   turn: int, turns: int) -> str:
    """The user turn that sends a failed attempt back to its author."""
    return "\n".join([
        f"Your last attempt failed ({problem}). Repair turn {turn} of {turns}.",
        *feedback,
        "",
        f"The file `{filename}` as your attempt left it (SEARCH blocks apply to this text):",
        "```",
        source.rstrip(),
        "```",
        "Fix the problem and reply in the same format.",
    ])


def review_message(candidate: Candidate, base: Candidate | None, verdict: Verdict | None) -> str:
    """The reviewer's prompt: the winning diff and the figures it won with."""
    old = base.sources.get(base.entry, "") if base is not None else ""
    new = candidate.sources.get(candidate.entry, "")
    diff = "".join(difflib.unified_diff(old.splitlines(keepends=True),
                                        new.splitlines(keepends=True),
                                        fromfile="before", tofile="after", n=3))
    figures = describe_verdict(verdict) if verdict is not None else []
    return "\n".join([
        f"Author: {candidate.agent}. Its rationale: {candidate.rationale or '(none)'}",
        "Measured:", *figures, "", "The diff:", "```diff", diff.rstrip() or "(no change)", "```",
    ])
