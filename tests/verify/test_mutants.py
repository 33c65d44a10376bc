"""The mutation catalogue on small sources: each operator rewrites the sites it is meant
for (and never a comment), a Python mutant stays valid Python and does what its class
says, and every class fits at least five times over the honest kernels of the delta
rule and three problem files. Pure text and a few torch calls: no sandbox, no build."""

from __future__ import annotations

import ast
from collections import Counter

import pytest
import torch

from swarmfab.evaluation.adequacy import honest_kernels
from swarmfab.verify._mutate_text import c_code, typo
from swarmfab.verify.mutants import CATALOGUE, Mutant, language_of, mutants_of, operator, parses
from swarmfab.workloads import get_workload

C_SOURCE = """\
/* a loop: for (int i = 0; i < n; i++) is in this comment */
static float kernel(const delta_args *a, const float *x, float *out, int n, int64_t hv)
{
    const int64_t h = hv / (a->HV / a->H);
    float acc = 0.0f;
    for (int i = 0; i < n; i++) acc += x[i] * 0.693359375f;
    for (int t0 = 0; t0 < n; t0 += 64) {
        const int L = n - t0 < 64 ? n - t0 : 64;
        out[t0] = (float)L - acc;
    }
    return delta_exp(x[0] - x[1]) + delta_floor_gate(x[h]);
}

static void run(float *out, int jobs)
{
#pragma omp parallel num_threads(2)
    {
        work w = {0};
#pragma omp for schedule(static)
        for (int job = 0; job < jobs; job++) out[job] = one(&w, job);
    }
}
"""

PY_SOURCE = '''\
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden))

    def forward(self, x):
        """Softmax of the scaled rows."""
        y = x * self.weight
        return torch.softmax(y, dim=-1)


class ModelNew(Model):
    def forward(self, *inputs):
        return super().forward(*inputs)
'''


def _of(name: str, source: str, language: str) -> list[Mutant]:
    return list(operator(name).mutants(source, language))


def _afters(name: str, source: str, language: str) -> set[str]:
    return {mutant.after for mutant in _of(name, source, language)}


def test_the_catalogue_has_ten_classes_or_more_each_described() -> None:
    assert len(CATALOGUE) >= 10
    assert len({op.name for op in CATALOGUE}) == len(CATALOGUE)
    assert all(op.description and op.languages for op in CATALOGUE)
    assert language_of("c") == "c" and language_of("torch-module") == "python"
    with pytest.raises(KeyError):
        operator("no-such-class")


def test_c_loop_bounds_and_tile_edges() -> None:
    afters = _afters("loop-bound", C_SOURCE, "c")
    assert {"i <= n", "i < n - 1", "t0 <= n", "t0 + 64 <= n", "64"} <= afters
    # the comment's loop is never a site: every mutant is of a line of code
    assert all(m.line > 1 for m in _of("loop-bound", C_SOURCE, "c"))


def test_c_clamps_exponents_scratch_and_indices() -> None:
    assert "(x[h])" in _afters("dropped-clamp", C_SOURCE, "c")
    assert "(delta_exp(x[0]) / delta_exp(x[1]))" in _afters("missing-max", C_SOURCE, "c")
    scratch = _of("shared-scratch", C_SOURCE, "c")
    assert {m.rule for m in scratch} == {"#pragma omp for removed",
                                         "per-thread scratch made static (shared by the threads)"}
    assert any("static work w = {0};" in m.source for m in scratch)
    assert "hv % a->H" in _afters("index-stride", C_SOURCE, "c")
    assert "acc = (float)(_Float16)(acc + (x[i] * 0.693359375f));" in _afters(
        "lower-precision", C_SOURCE, "c")
    assert "0.963359375f" in _afters("constant", C_SOURCE, "c")
    assert " + " in _afters("sign-flip", C_SOURCE, "c")
    assert "(void)0;" in _afters("dropped-term", C_SOURCE, "c")


def test_masking_keeps_offsets_and_blanks_comments_and_directives() -> None:
    code = c_code(C_SOURCE)
    assert len(code) == len(C_SOURCE)
    assert "for (int i" not in code.splitlines()[0]
    assert "#pragma" not in code


def test_typos() -> None:
    assert typo("0.693359375") == "0.963359375"
    assert typo("1.0") == "1.0e1"
    assert typo("2.5e-4") == "5.2e-4"
    assert typo("0.0") is None


def _module(mutant: Mutant) -> dict[str, object]:
    namespace: dict[str, object] = {}
    exec(compile(mutant.source, "<mutant>", "exec"), namespace)
    return namespace


def _rule(name: str, rule: str, source: str = PY_SOURCE) -> list[Mutant]:
    found = [m for m in _of(name, source, "python") if m.rule == rule]
    assert found, f"no {name} mutant by {rule!r}"
    return found


def test_every_python_mutant_parses() -> None:
    mutants = list(mutants_of(PY_SOURCE, "python"))
    assert {m.operator for m in mutants} >= {"missing-max", "contiguity", "in-place-update",
                                             "lower-precision", "lazy-result", "special-values",
                                             "shared-scratch", "index-stride"}
    assert all(parses(m) for m in mutants)


def test_python_softmax_without_its_maximum_overflows() -> None:
    mutant = _rule("missing-max", "softmax without the row maximum")[0]
    model = _module(mutant)["Model"](4)  # type: ignore[operator]
    assert torch.isnan(model(torch.tensor([[1000.0, 0.0, 0.0, 0.0]]))).any()


def test_python_contiguity_reads_storage_as_if_contiguous() -> None:
    mutant = _rule("contiguity", "x assumed contiguous")[0]
    model = _module(mutant)["Model"](3)  # type: ignore[operator]
    wide = torch.randn(2, 5)
    x = wide[:, 1:4]  # a view into a wider buffer
    reference = torch.softmax(x, dim=-1)
    assert not torch.allclose(model(x), reference)
    assert torch.allclose(model(x.contiguous()), reference)


def test_python_lazy_and_in_place_mutants_do_what_they_say() -> None:
    lazy = _module(_rule("lazy-result", "computed on first read")[0])["Model"](4)  # type: ignore[operator]
    out = lazy(torch.randn(2, 4))
    assert type(out) is not torch.Tensor
    nudged = _module(_rule("in-place-update", "parameters nudged every call")[0])["Model"](4)  # type: ignore[operator]
    before = nudged.weight.detach().clone()
    nudged(torch.randn(2, 4))
    assert not torch.equal(before, nudged.weight.detach())


def test_a_mutant_names_its_site() -> None:
    mutant = _rule("index-stride", "a reduction over the next axis")[0]
    assert mutant.site == "line 13: '-1' -> '-2'"
    assert ast.parse(mutant.source)


def test_every_class_fits_five_times_over_the_honest_kernels() -> None:
    counts: Counter[str] = Counter()
    for name in ("kda", "examples/problems/02_gemm_bias_gelu.py",
                 "examples/problems/07_layernorm.py",
                 "examples/problems/10_softmax_temperature.py"):
        for subject in honest_kernels(get_workload(name), name, threads=2):
            candidate = subject.candidate
            language = language_of(candidate.backend)
            assert language is not None
            for mutant in mutants_of(candidate.sources[candidate.entry], language):
                assert parses(mutant), mutant.site
                counts[mutant.operator] += 1
    assert {op.name for op in CATALOGUE} == set(counts)
    assert min(counts.values()) >= 5, counts
