"""Red-team rows for problem files: wrong ModelNew candidates against the verifier.

Each file in ``problems/`` answers one of ``examples/problems`` and is wrong in a way
the field's optimisers are (its docstring says how, and what must catch it). Each is
run through the command line as a user would::

    swarmfab verify examples/problems/P.py FILE --json

and the verdict must be a rejection that names the check. Rows the fast tier alone
accepts (``battery_only``) are checked to be real gaps of it: the battery rejects them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest
from typer.testing import CliRunner

from swarmfab.cli import app

HERE = Path(__file__).parent / "problems"
EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "problems"


@dataclass(frozen=True)
class Row:
    problem: str
    file: str
    expect: tuple[str, ...]  # every fragment must appear in the verdict's reason
    battery_only: bool = False


ROWS = [
    Row("14_swish_scale_bias_clamp", "swish_folds_bias.py",
        ("parameters and buffers unchanged", "bias")),
    Row("02_gemm_bias_gelu", "gemm_caches_weight.py", ("out matches reference",)),
    Row("02_gemm_bias_gelu", "gemm_tanh_through_exp.py",
        ("'battery: inputs scaled by 1000'", "non-finite"), battery_only=True),
    Row("10_softmax_temperature", "softmax_without_max.py",
        ("'battery: inputs scaled by 1000'", "non-finite"), battery_only=True),
    Row("10_softmax_temperature", "softmax_lazy.py", ("outputs are plain tensors", "Deferred")),
    Row("07_layernorm", "layernorm_reads_storage.py",
        ("'small, other seed, inputs strided'", "out matches reference")),
    Row("07_layernorm", "layernorm_second_block.py", ("battery: the file's sizes",),
        battery_only=True),
]


def verify(problem: str, file: str, workdir: Path, *extra: str) -> tuple[int, dict]:
    result = CliRunner().invoke(app, [
        "verify", str(EXAMPLES / f"{problem}.py"), str(HERE / file), "--json", "--db",
        str(workdir / "x.db"), "--workdir", str(workdir), *extra])
    assert "Traceback" not in result.output, result.output
    return result.exit_code, json.loads(result.stdout)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("problem-rows")


@pytest.mark.slow
@pytest.mark.parametrize("row", ROWS, ids=[Path(row.file).stem for row in ROWS])
def test_verify_rejects_the_wrong_module_and_names_the_check(row: Row, workdir: Path) -> None:
    code, verdict = verify(row.problem, row.file, workdir / row.problem)
    summary = f"{verdict['status']}: {verdict['reason']}"
    assert (code, verdict["status"]) == (1, "rejected"), summary
    for fragment in row.expect:
        assert fragment in verdict["reason"], f"{fragment!r} not in {summary}"


@pytest.mark.slow
@pytest.mark.parametrize("row", [row for row in ROWS if row.battery_only],
                         ids=[Path(row.file).stem for row in ROWS if row.battery_only])
def test_the_fast_tier_alone_accepts_what_only_the_battery_rejects(
    row: Row, tmp_path: Path
) -> None:
    code, verdict = verify(row.problem, row.file, tmp_path, "--fast")
    assert (code, verdict["status"]) == (0, "accepted"), verdict["reason"]


@pytest.mark.slow
def test_the_honest_module_passes_both_tiers(workdir: Path) -> None:
    code, verdict = verify("02_gemm_bias_gelu", "gemm_honest.py", workdir / "honest")
    assert (code, verdict["status"]) == (0, "accepted"), verdict["reason"]
    assert "of them the battery's" in verdict["reason"]
