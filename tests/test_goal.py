"""Goals: TOML files and defaults, validated into one GoalError naming field and allowed values."""

from __future__ import annotations

from pathlib import Path

import pytest

from swarmfab.errors import GoalError
from swarmfab.goal import Goal, default_goal, load_goal, parse_duration
from swarmfab.workloads import Shape, get_workload
from swarmfab.workloads.delta.kda import KDA

VALID = """
workload = "kda"
budget = "90s"
threads = 3
seed = 7
eval_timeout = "2m"
max_evaluations = 12
shapes = [
  {B = 1, T = 256, H = 4, K = 64, V = 64},
  {B = 2, T = 64, H = 2, HV = 4, K = 32, V = 48, initial_state = true},
]

[tolerance]
rms_ratio = 2e-4
"""


def _goal_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "goal.toml"
    path.write_text(text)
    return path


def _with_shapes(shapes: str, extra: str = "") -> str:
    return f'workload = "kda"\n{extra}\nshapes = [{shapes}]\n'


def test_load_valid_goal(tmp_path: Path) -> None:
    goal = load_goal(_goal_file(tmp_path, VALID))
    assert goal.workload == "kda"
    assert goal.budget_s == 90.0
    assert goal.eval_timeout_s == 120.0
    assert (goal.threads, goal.seed, goal.max_evaluations) == (3, 7, 12)
    assert goal.tolerance.rms_ratio == 2e-4
    assert goal.tolerance.max_abs is None
    assert goal.target_shapes() == [
        Shape(B=1, T=256, H=4, HV=4, K=64, V=64),  # HV defaults to H
        Shape(B=2, T=64, H=2, HV=4, K=32, V=48, initial_state=True),
    ]


def test_default_goal_uses_the_workload_defaults() -> None:
    goal = default_goal("kda")
    assert goal.workload == "kda"
    assert goal.target_shapes() == list(KDA.default_shapes)
    assert (goal.device, goal.dtype, goal.metric) == ("cpu", "float32", "latency")
    assert goal.budget_s == 60.0
    assert goal.threads >= 1
    assert goal.agents == ["builtin"]
    assert goal.tolerance.rms_ratio is None and goal.tolerance.max_abs is None


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("60s", 60.0), ("10m", 600.0), ("1.5h", 5400.0), ("2min", 120.0), ("250ms", 0.25),
     ("90", 90.0), (" 5 s ", 5.0), (45, 45.0), (2.5, 2.5)],
)
def test_parse_duration(text: str | float, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "ten minutes", "5 parsecs", "-5s", "1.5.2h", "s", "0s", 0])
def test_parse_duration_rejects_bad_strings(text: str | int) -> None:
    with pytest.raises(ValueError):
        parse_duration(text)


@pytest.mark.parametrize(
    ("text", "must_mention"),
    [
        (_with_shapes("{B=1, T=8, H=1, K=8, V=8}", "colour = 'blue'"), ["colour"]),
        (_with_shapes("{B=1, T=8, H=1, K=8, V=8}", 'device = "gpu"'), ["device", "'cpu'", "gpu"]),
        (_with_shapes("{B=1, T=-4, H=1, K=8, V=8}"), ["shapes.0.T", "greater than or equal to 1"]),
        (_with_shapes("{B=1, T=8, H=4, HV=6, K=8, V=8}"), ["shapes.0", "multiple of H"]),
        (_with_shapes("{B=1, T=8, H=1, K=8, V=8, W=3}"), ["shapes.0.W"]),
        (_with_shapes("{B=1, T=8, H=1, K=8, V=8}", 'budget = "soon"'), ["budget", "soon"]),
        (_with_shapes("{B=1, T=8, H=1, K=8, V=8}", "threads = 0"), ["threads"]),
        (_with_shapes("{B=1, T=8, H=1, K=8, V=8}", 'dtype = "float16"'),
         ["dtype", "float32", "bfloat16"]),
        (_with_shapes("{B=1, T=8, H=1, K=8, V=8}", "[tolerance]\nrms_ratio = 2.0"),
         ["tolerance.rms_ratio"]),
        ('workload = "kda"\nshapes = []\n', ["shapes"]),
    ],
    ids=["unknown-field", "device-gpu", "negative-T", "hv-not-multiple", "unknown-shape-field",
         "bad-budget", "zero-threads", "bad-dtype", "tolerance-out-of-range", "no-shapes"],
)
def test_invalid_goal_raises_goal_error_naming_the_field(
    tmp_path: Path, text: str, must_mention: list[str]
) -> None:
    path = _goal_file(tmp_path, text)
    with pytest.raises(GoalError) as info:
        load_goal(path)
    message = str(info.value)
    assert str(path) in message
    for fragment in must_mention:
        assert fragment in message, message


def test_unknown_workload_raises_goal_error_listing_known_workloads(tmp_path: Path) -> None:
    path = _goal_file(tmp_path, _with_shapes("{B=1, T=8, H=1, K=8, V=8}").replace("kda", "mamba"))
    with pytest.raises(GoalError) as info:
        load_goal(path)
    assert "workload" in str(info.value)
    assert "mamba" in str(info.value)
    assert "kda" in str(info.value)


def test_malformed_toml_raises_goal_error(tmp_path: Path) -> None:
    path = _goal_file(tmp_path, 'workload = "kda"\nshapes = [{B=1,\n')
    with pytest.raises(GoalError, match="not valid TOML"):
        load_goal(path)


def test_missing_file_raises_goal_error(tmp_path: Path) -> None:
    with pytest.raises(GoalError, match="does not exist"):
        load_goal(tmp_path / "nowhere.toml")


def test_with_overrides_validates_and_leaves_the_original_alone() -> None:
    goal = default_goal("kda")
    changed = goal.with_overrides(budget="40s", threads=1, seed=3, max_evaluations=None)
    assert (changed.budget_s, changed.threads, changed.seed) == (40.0, 1, 3)
    assert changed.max_evaluations is None  # None means "keep"
    assert goal.budget_s == 60.0
    assert changed.shapes == goal.shapes
    with pytest.raises(GoalError, match="threads"):
        goal.with_overrides(threads=0)
    with pytest.raises(GoalError, match="budget"):
        goal.with_overrides(budget="whenever")
    with pytest.raises(GoalError, match="command line"):
        goal.with_overrides(seed=-1)


def test_goals_are_immutable() -> None:
    goal = default_goal("kda")
    with pytest.raises(Exception):  # noqa: B017 - pydantic raises its own frozen error
        goal.seed = 5  # type: ignore[misc]
    assert isinstance(goal, Goal)


def test_goal_file_without_shapes_targets_the_workloads_default_shapes(tmp_path: Path) -> None:
    goal = load_goal(_goal_file(tmp_path, 'workload = "kda"\n'))
    assert goal.shapes is None
    assert goal.target_shapes() == list(get_workload("kda").default_shapes)


def test_a_cuda_goal_is_valid_and_keeps_the_gpu_baselines_apart(tmp_path: Path) -> None:
    path = tmp_path / "goal.toml"
    path.write_text(_with_shapes("{B=1, T=8, H=1, K=8, V=8}", 'device = "cuda"'))
    assert load_goal(path).device == "cuda"
    kda = KDA()
    # fla's kernels are never among the CPU defaults; without fla a GPU goal times the
    # PyTorch baselines on the device
    assert not set(kda.default_baselines("cpu")) & kda.cuda_baselines
    if not kda.fla_baselines():
        assert kda.default_baselines("cuda") == kda.default_baselines("cpu")


@pytest.mark.parametrize(
    ("text", "must_mention"),
    [
        ('workload = "kda"\nbudgt = "60s"\n',
         ["budgt: unknown key", "did you mean 'budget'?", "Allowed keys of a goal:",
          "eval_timeout", "tolerance"]),
        (_with_shapes("{B=1, T=8, H=1, K=8, V=8, Hv=2}"),
         ["shapes.0.Hv: unknown key", "did you mean 'HV'?",
          "Allowed keys of a shape: B, T, H, K, V, HV, initial_state"]),
        ('workload = "kda"\n[tolerance]\nrms = 1e-3\n',
         ["tolerance.rms: unknown key", "Allowed keys of [tolerance]: rms_ratio, max_abs"]),
        ('workload = "kda"\n[llm]\ntimeuot = "30s"\n',
         ["llm.timeuot: unknown key", "did you mean 'timeout'?", "api_key_env"]),
    ],
    ids=["top-level", "in-a-shape", "in-tolerance", "in-llm"],
)
def test_a_misspelt_key_lists_the_allowed_keys(
    tmp_path: Path, text: str, must_mention: list[str]
) -> None:
    with pytest.raises(GoalError) as info:
        load_goal(_goal_file(tmp_path, text))
    for fragment in must_mention:
        assert fragment in str(info.value), str(info.value)


def test_bfloat16_is_a_dtype_of_the_delta_rule_and_not_of_a_problem_file(tmp_path: Path) -> None:
    goal = load_goal(_goal_file(tmp_path, _with_shapes("{B=1, T=8, H=1, K=8, V=8}",
                                                       'dtype = "bfloat16"')))
    assert goal.dtype == "bfloat16"
    problem = Path(__file__).parents[1] / "examples" / "problems" / "08_rmsnorm.py"
    text = f'workload = "{problem}"\ndtype = "bfloat16"\n'
    with pytest.raises(GoalError, match="takes its inputs in float32"):
        load_goal(_goal_file(tmp_path, text))


def test_a_goal_names_packed_sequences_by_their_lengths(tmp_path: Path) -> None:
    """fla's cu_seqlens as a target shape: B = 1 and T filled in from the lengths."""
    goal = tmp_path / "goal.toml"
    goal.write_text('workload = "kda"\nshapes = [{H = 2, K = 64, V = 64, lengths = [4, 4, '
                    '200], initial_state = true}]\n')
    [shape] = load_goal(goal).target_shapes()
    assert isinstance(shape, Shape)
    assert (shape.B, shape.T, shape.lengths) == (1, 208, (4, 4, 200))
    assert shape.label == "varlen3 T208 H2 K64 V64 +h0"
    goal.write_text('workload = "kda"\nshapes = [{B = 2, H = 2, K = 64, V = 64, '
                    'lengths = [4, 4]}]\n')
    with pytest.raises(GoalError, match="packed lengths need B = 1"):
        load_goal(goal)
