"""The command line's promises about usage: exit code 2 for a usage error, before any
work is done; `swarmfab --help` without the heavy imports; goal keys named when misspelt."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from swarmfab.cli import app


def invoke(*args: str | Path) -> Result:
    return CliRunner().invoke(app, [str(a) for a in args])


@pytest.fixture
def kernel(tmp_path: Path) -> Path:
    path = tmp_path / "kernel.c"
    path.write_text("int kda_forward(void) { return 0; }\n")
    return path


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["verify", "kda", "{tmp}/gone.c"], "does not exist"),
        (["verify", "kda", "{tmp}"], "is a directory"),
        (["verify", "kda", "{tmp}/notes.txt"], "unknown candidate format"),
        (["verify", "kda", "{tmp}/latin1.c"], "cannot read candidate"),
        (["verify", "kda", "{kernel}", "--backend", "fortran"], "--backend 'fortran'"),
        (["verify", "kda", "{kernel}", "--fuzz", "-1"], "--fuzz"),
        (["bench", "kda", "--candidate", "{tmp}/gone.c"], "does not exist"),
        (["bench", "kda", "--baseline", "numpy-magic"], "--baseline numpy-magic"),
        (["run", "kda", "--executor", "slurm"], "--executor 'slurm'"),
        (["loadgen", "--goodput", "ttft:soon"], "ttft:MS"),
        (["loadgen", "--num-prompts", "0"], "--num-prompts"),
        (["serve", "{tmp}/no-such-model"], "is not a directory"),
    ],
    ids=["missing-file", "directory", "unknown-format", "not-utf8", "bad-backend",
         "negative-fuzz", "bench-missing-candidate", "bench-unknown-baseline",
         "unknown-executor", "bad-goodput", "zero-prompts", "serve-missing-dir"],
)
def test_usage_errors_exit_2_before_any_work(
    tmp_path: Path, kernel: Path, args: list[str], message: str
) -> None:
    (tmp_path / "notes.txt").write_text("int kda_forward(void) { return 0; }\n")
    (tmp_path / "latin1.c").write_bytes(b"/* caf\xe9 */\nint kda_forward(void) { return 0; }\n")
    filled = [a.format(tmp=tmp_path, kernel=kernel) for a in args]
    if filled[0] in ("verify", "bench", "run"):
        filled += ["--db", str(tmp_path / "x.db"), "--workdir", str(tmp_path / "wd")]
    result = invoke(*filled)
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert "Traceback" not in result.output
    assert not (tmp_path / "wd").exists()  # nothing was built or measured


def test_the_cli_imports_nothing_heavy_and_help_answers() -> None:
    heavy = ("torch", "numpy", "sqlalchemy", "alembic", "pydantic", "swarmfab.workloads",
             "swarmfab.knowledge", "swarmfab.goal")
    probe = ("import sys, swarmfab.cli; "
             f"print(sorted(m for m in {heavy!r} if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=120, check=True)
    assert done.stdout.strip() == "[]", done.stdout + done.stderr
    for args in ([], ["run"]):
        helped = subprocess.run([sys.executable, "-m", "swarmfab", *args, "--help"],
                                capture_output=True, text=True, timeout=120, check=False)
        assert helped.returncode == 0, helped.stderr
        assert "Usage" in helped.stdout


def test_the_cli_default_store_is_the_store_default() -> None:
    from swarmfab import knowledge
    from swarmfab.cli import _common

    assert str(knowledge.DEFAULT_DB) == _common.DEFAULT_DB


def test_a_misspelt_goal_key_is_refused_with_the_allowed_keys(tmp_path: Path) -> None:
    goal = tmp_path / "goal.toml"
    goal.write_text('workload = "kda"\nbudgt = "60s"\n[llm]\nmodle = "m"\n')
    result = invoke("run", goal, "--db", tmp_path / "x.db", "--workdir", tmp_path / "wd")
    assert result.exit_code == 2, result.output
    assert "budgt: unknown key" in result.output and "did you mean 'budget'" in result.output
    assert "llm.modle: unknown key" in result.output and "did you mean 'model'" in result.output
    assert "eval_timeout" in result.output and "Allowed keys of [llm]: provider" in result.output
    assert not (tmp_path / "wd").exists()


def test_corpus_add_list_show(tmp_path: Path) -> None:
    db = tmp_path / "x.db"
    added = invoke("corpus", "add", "kda", "--shape", "1,8,1,8,8+h0", "--name", "mine",
                   "--db", db)
    assert added.exit_code == 0, added.output
    listed = invoke("corpus", "list", "kda", "--json", "--db", db)
    assert listed.exit_code == 0, listed.output
    assert "mine" in listed.output
    shown = invoke("corpus", "show", "kda", "mine", "--db", db)
    assert shown.exit_code == 0 and '"initial_state": true' in shown.output
    again = invoke("corpus", "add", "kda", "--shape", "1,8,1,8,8", "--name", "mine", "--db", db)
    assert again.exit_code == 1 and "already has a case named 'mine'" in again.output
    bad = invoke("corpus", "add", "kda", "--shape", "1,8,1,8,8", "--beta", "huge", "--db", db)
    assert bad.exit_code == 2
