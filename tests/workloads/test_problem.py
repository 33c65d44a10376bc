"""Problem files (KernelBench convention): loaded as workloads, sized, verified, cheats caught."""

from __future__ import annotations

import json
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from typer.testing import CliRunner

from swarmfab.cli import app
from swarmfab.errors import CandidateError, GoalError, WorkloadError
from swarmfab.goal import default_goal
from swarmfab.kernels import BF16_FLAGS, DesignSpace
from swarmfab.kernels.gemm import onednn_available, onednn_clearly_faster
from swarmfab.kernels.module import BF16_MIN_ROWS, module_space
from swarmfab.workloads import Case, Dims, design_space, get_workload
from swarmfab.workloads.problem.sizes import (
    fit_to_host,
    halved,
    problem_sizes,
    resized_source,
)
from swarmfab.workloads.problem.workload import ProblemWorkload, build_module

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "problems"

# y = relu(x @ W^T + b) * scale, with a derived size: what every check below runs on
PROBLEM = '''"""A linear layer, ReLU and a scale."""
import torch
import torch.nn as nn

batch_size = 32
in_features = 64
out_features = 2 * in_features
axis = 1


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)

    def forward(self, x):
        return torch.relu(self.fc(x)) * 0.5


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
'''
HONEST = PROBLEM + '''

class ModelNew(Model):
    def forward(self, x):
        return torch.addmm(self.fc.bias, x, self.fc.weight.t()).clamp_min_(0).mul_(0.5)
'''
# computes correctly only at the file's own batch size
ONE_SIZE_ONLY = PROBLEM + '''

class ModelNew(Model):
    def forward(self, x):
        return (torch.relu(self.fc(x.reshape(32, -1))) * 0.5)
'''
# ignores the weights it is given: keeps those of its own initialisation
OWN_WEIGHTS = PROBLEM + '''

class ModelNew(Model):
    def __init__(self, *args):
        super().__init__(*args)
        self.kept = [p.detach().clone() for p in (self.fc.weight, self.fc.bias)]

    def forward(self, x):
        weight, bias = self.kept
        return torch.relu(x @ weight.t() + bias) * 0.5
'''
# its weights live under other names: it cannot be given Model's
RENAMED = PROBLEM + '''

class ModelNew(torch.nn.Module):
    def __init__(self, *args):
        super().__init__()
        self.inner = Model(*args)

    def forward(self, x):
        return self.inner(x)
'''
IDENTITY_PROBLEM = '''"""ReLU of a positive input: the output equals the input."""
import torch
import torch.nn as nn

rows = 64
cols = 32


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.rand(rows, cols) + 0.1]


def get_init_inputs():
    return []
'''
RETURNS_ITS_INPUT = IDENTITY_PROBLEM + '''

class ModelNew(Model):
    def forward(self, x):
        return x.view(x.shape)
'''


@pytest.fixture
def problem_file(tmp_path: Path) -> Path:
    path = tmp_path / "linear_relu.py"
    path.write_text(PROBLEM)
    return path


def _verify(tmp_path: Path, problem: Path, source: str) -> tuple[int, dict[str, object]]:
    candidate = tmp_path / "model_new.py"
    candidate.write_text(source)
    result = CliRunner().invoke(app, [
        "verify", str(problem), str(candidate), "--json", "--threads", "1",
        "--db", str(tmp_path / "x.db"), "--workdir", str(tmp_path / "work")])
    return result.exit_code, json.loads(result.stdout)


def test_sizes_are_the_module_level_integers_of_at_least_eight() -> None:
    assert problem_sizes(PROBLEM) == {"batch_size": 32, "in_features": 64}
    resized = resized_source(PROBLEM, {"in_features": 24})
    assert "in_features = 24" in resized and "out_features = 2 * in_features" in resized
    with pytest.raises(WorkloadError, match="unknown size"):
        resized_source(PROBLEM, {"axis": 3})


def test_halving_keeps_ratios_and_refuses_what_would_break() -> None:
    assert halved({"a": 64, "b": 16}) == {"a": 32, "b": 8}
    assert halved({"a": 64, "b": 16}, times=2) is None  # b would fall under 8
    assert halved({"a": 12, "b": 24}) == {"a": 6, "b": 12} or halved({"a": 12}) is None
    assert halved({"a": 18}) == {"a": 9} and halved({"a": 9}) is None


def test_a_problem_file_loads_as_a_workload(problem_file: Path) -> None:
    problem = get_workload(str(problem_file))
    assert isinstance(problem, ProblemWorkload)
    assert problem.output_names == ("out",)
    assert problem.default_shapes == (Dims.of(batch_size=32, in_features=64),)
    assert problem.python_backend == "torch-module"
    assert set(problem.baselines()) == {"torch-eager", "torch-compile"}


def test_derived_sizes_follow_and_weights_come_from_the_case(problem_file: Path) -> None:
    problem = get_workload(str(problem_file))
    assert isinstance(problem, ProblemWorkload)
    dims = problem.dims_of({"in_features": 24})
    inputs = problem.make_inputs(Case("c", dims, seed=5))
    state = inputs["module"]
    assert state.weights["fc.weight"].shape == (48, 24)  # out_features = 2 * in_features
    again = problem.make_inputs(Case("c", dims, seed=5))["module"]
    twin = problem.make_inputs(Case("c", dims, seed=5).twin())["module"]
    other = problem.make_inputs(Case("c", dims, seed=6))["module"]
    assert torch.equal(state.weights["fc.weight"], again.weights["fc.weight"])
    assert torch.equal(state.weights["fc.weight"], twin.weights["fc.weight"])
    assert not torch.equal(state.weights["fc.weight"], other.weights["fc.weight"])


def test_validation_changes_every_size_and_the_seed(problem_file: Path) -> None:
    problem = get_workload(str(problem_file))
    cases = problem.validation_cases()
    shapes = {case.shape for case in cases}
    assert len(shapes) >= 2 and len({case.seed for case in cases}) == len(cases)
    for name in ("batch_size", "in_features"):
        assert len({dict(shape.sizes)[name] for shape in shapes}) >= 2, name


def test_the_reference_is_float64_and_eager_matches_it(problem_file: Path) -> None:
    problem = get_workload(str(problem_file))
    inputs = problem.make_inputs(problem.validation_cases()[0])
    reference = problem.reference(inputs)["out"]
    assert reference.dtype == torch.float64
    eager = problem.call(problem.baselines()["torch-eager"], inputs)["out"]
    assert eager.dtype == torch.float32
    assert torch.allclose(eager.double(), reference, atol=1e-5)


def test_a_candidate_is_given_models_weights_by_name(problem_file: Path) -> None:
    problem = get_workload(str(problem_file))
    assert isinstance(problem, ProblemWorkload)
    state = problem.make_inputs(problem.validation_cases()[0])["module"]
    namespace: dict[str, object] = {}
    exec(compile(RENAMED, "renamed", "exec"), namespace)
    with pytest.raises(CandidateError, match=r"no parameter or buffer named fc\.weight"):
        build_module(namespace["ModelNew"], state, None)
    exec(compile(HONEST, "honest", "exec"), namespace)
    module = build_module(namespace["ModelNew"], state, None)
    assert torch.equal(module.fc.weight, state.weights["fc.weight"])


@pytest.mark.slow  # the whole verification battery: tens of seconds
def test_honest_candidate_is_accepted(tmp_path: Path, problem_file: Path) -> None:
    code, verdict = _verify(tmp_path, problem_file, HONEST)
    assert code == 0 and verdict["status"] == "accepted", verdict["reason"]


@pytest.mark.parametrize(("source", "reason"), [
    (ONE_SIZE_ONLY, "raised"),
    (OWN_WEIGHTS, "out matches reference"),
    (RENAMED, "no parameter or buffer named fc.weight"),
], ids=["hard-codes-one-size", "keeps-its-own-weights", "weights-under-other-names"])
def test_cheating_candidates_are_rejected(tmp_path: Path, problem_file: Path, source: str,
                                          reason: str) -> None:
    code, verdict = _verify(tmp_path, problem_file, source)
    assert code == 1 and verdict["status"] == "rejected"
    assert reason in str(verdict["reason"])


def test_returning_a_view_of_the_input_is_rejected(tmp_path: Path) -> None:
    problem = tmp_path / "identity.py"
    problem.write_text(IDENTITY_PROBLEM)
    code, verdict = _verify(tmp_path, problem, RETURNS_ITS_INPUT)
    assert code == 1 and "outputs do not alias inputs" in str(verdict["reason"])


def test_every_setting_renders_a_file_that_defines_model_new(problem_file: Path) -> None:
    space = design_space(str(problem_file))
    assert space.backend == "torch-module"
    for knob in space.knobs:
        for value in knob.values:
            candidate = space.instantiate({**space.default(), knob.name: value}, threads=2)
            source = candidate.sources[candidate.entry]
            compile(source, candidate.entry, "exec")
            assert "class ModelNew(Model):" in source and PROBLEM.strip() in source


def _in_this_process(space: DesignSpace) -> dict[str, object]:
    """The default setting, but leaving this process's malloc as it is (these tests run
    candidates in the test process)."""
    setting = dict(space.default())
    if any(knob.name == "allocator" for knob in space.knobs):
        setting["allocator"] = "system"
    return setting


def test_eager_setting_runs_and_matches(problem_file: Path) -> None:
    problem = get_workload(str(problem_file))
    space = design_space(str(problem_file))
    for engine in ("eager", "jit-freeze"):
        candidate = space.instantiate({**_in_this_process(space), "engine": engine},
                                      threads=1)
        namespace: dict[str, object] = {}
        exec(compile(candidate.sources[candidate.entry], "c", "exec"), namespace)
        inputs = problem.make_inputs(problem.validation_cases()[0])
        with torch.no_grad():
            out = problem.call(namespace["ModelNew"], inputs)["out"]
        assert torch.allclose(out.double(), problem.reference(inputs)["out"], atol=1e-5), engine


def test_bfloat16_leaves_a_call_of_few_rows_in_float32_and_reads_no_gemm_knob() -> None:
    """A GEMM of a few rows (a decode step) is memory-bound: float32 is faster there."""
    space = module_space("linear-relu", PROBLEM, flags=frozenset(BF16_FLAGS))
    setting = {**_in_this_process(space), "engine": "eager", "precision": "bfloat16"}
    candidate = space.instantiate(setting, threads=1)
    if any(knob.name == "gemm" for knob in space.knobs):  # autocast's GEMMs, whichever
        for gemm in space.knob("gemm").values:
            assert space.instantiate({**setting, "gemm": gemm}, threads=1).id == candidate.id
    namespace: dict[str, Any] = {}
    exec(compile(candidate.sources[candidate.entry], "c", "exec"), namespace)
    torch.manual_seed(0)
    model, new = namespace["Model"](64, 128), namespace["ModelNew"](64, 128)
    new.load_state_dict(model.state_dict())
    few, many = torch.randn(BF16_MIN_ROWS - 1, 64), torch.randn(2, BF16_MIN_ROWS // 2, 64)
    with torch.no_grad():
        assert torch.equal(new(few), model(few))  # float32, the Model's own forward
        out, expected = new(many), model(many)
    assert out.dtype == torch.float32 and not torch.equal(out, expected)
    assert torch.allclose(out, expected, rtol=2e-2, atol=2e-2)  # bfloat16's rounding


@pytest.mark.skipif(not onednn_available(), reason="this PyTorch has no oneDNN")
def test_the_gemm_library_starts_from_the_one_faster_here(
        problem_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for faster, default in ((True, "onednn"), (False, "aten")):
        monkeypatch.setattr("swarmfab.kernels.module.onednn_gemm_faster",
                            lambda faster=faster: faster)
        assert design_space(str(problem_file)).default()["gemm"] == default
    x, weight = torch.ones(64, 32), torch.ones(16, 32)
    assert onednn_clearly_faster(x, weight, lambda x, w: x, rounds=3)  # no work at all
    # ten times a loaded host's stall of a tiny F.linear (one CI run read 5 ms as faster)
    assert not onednn_clearly_faster(x, weight, lambda x, w: time.sleep(0.05), rounds=5)


@pytest.mark.skipif(not onednn_available(), reason="this PyTorch has no oneDNN")
@pytest.mark.parametrize("engine", ["eager", "inductor"])
def test_gemms_through_onednn_run_and_match(problem_file: Path, engine: str) -> None:
    problem = get_workload(str(problem_file))
    space = design_space(str(problem_file))
    assert space.knob("gemm").values == ("aten", "onednn")
    candidate = space.instantiate({**_in_this_process(space), "engine": engine,
                                   "gemm": "onednn"}, threads=1)
    namespace: dict[str, object] = {}
    exec(compile(candidate.sources[candidate.entry], "c", "exec"), namespace)
    inputs = problem.make_inputs(problem.validation_cases()[0])
    with torch.profiler.profile() as profile, torch.no_grad():
        out = problem.call(namespace["ModelNew"], inputs)["out"]
    assert torch.allclose(out.double(), problem.reference(inputs)["out"], atol=1e-5)
    names = {event.name for event in profile.events()}
    assert "model_new::onednn_linear" in names or "mkldnn::_linear_pointwise" in names, names
    # the file runs again (another size, another candidate) in the same process
    exec(compile(candidate.sources[candidate.entry], "c", "exec"), {})


def test_sizes_are_fitted_to_the_host_and_kept_in_the_goal(problem_file: Path) -> None:
    problem = get_workload(str(problem_file))
    assert isinstance(problem, ProblemWorkload)
    fitted = fit_to_host(problem, threads=1, max_eager_s=1e-9)  # nothing is that fast
    assert fitted.halvings == 2 and fitted.dims == Dims.of(batch_size=8, in_features=16)
    assert "batch_size 32->8" in fitted.describe(problem.sizes)
    roomy = fit_to_host(problem, threads=1, max_eager_s=10.0)
    assert roomy.halvings == 0
    goal = default_goal(str(problem_file)).with_overrides(sizes=[dict(fitted.dims.sizes)])
    assert goal.target_shapes() == [fitted.dims]
    with pytest.raises(GoalError, match="has no size depth"):
        default_goal(str(problem_file)).with_overrides(sizes=[{"depth": 3}])


def test_a_file_without_sizes_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "no_sizes.py"
    path.write_text(IDENTITY_PROBLEM.replace("rows = 64", "rows = 4").replace(
        "cols = 32", "cols = 2"))
    with pytest.raises(WorkloadError, match="no module-level size"):
        get_workload(str(path))


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.py")), ids=lambda p: p.stem)
def test_example_problems_load_and_validate(path: Path) -> None:
    problem = get_workload(str(path))
    assert isinstance(problem, ProblemWorkload)
    assert len(problem.validation_cases()) >= 3
    assert problem.runs_at(problem.default_shapes[0])  # type: ignore[arg-type]


def test_there_are_at_least_twelve_example_problems() -> None:
    assert len(list(EXAMPLES.glob("*.py"))) >= 12


def test_a_problem_module_without_model_new_is_a_clear_rejection(tmp_path: Path,
                                                                 problem_file: Path) -> None:
    code, verdict = _verify(tmp_path, problem_file, textwrap.dedent(PROBLEM))
    assert code == 1 and "ModelNew" in str(verdict["reason"])
