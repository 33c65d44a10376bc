"""The core install leaves optional features to extras: the core commands' modules import
without any extra's package, and a command that needs a missing one names the extra to
install instead of failing with a traceback. (tests/test_install.py installs the core for
real, in ``make test-integration``.)"""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from swarmfab.cli import app
from swarmfab.errors import MissingExtraError, SwarmfabError, import_extra

ROOT = Path(__file__).resolve().parents[1]
# each extra's packages as imported, and the distributions pyproject.toml names for them
EXTRAS = {
    "llm": {"openai": "openai", "anthropic": "anthropic"},
    "engine": {"fastapi": "fastapi", "uvicorn": "uvicorn", "httpx": "httpx",
               "safetensors": "safetensors", "tokenizers": "tokenizers",
               "prometheus_client": "prometheus-client"},
    "postgres": {"psycopg": "psycopg[binary]"},
    "report": {"matplotlib": "matplotlib", "fastapi": "fastapi", "uvicorn": "uvicorn"},
    "numba": {"numba": "numba"},
    "ray": {"ray": "ray"},
    "gpu": {"triton": "triton"},
}
OPTIONAL = sorted({module for modules in EXTRAS.values() for module in modules}
                  | {"starlette", "transformers"})


def invoke(*args: str | Path) -> Result:
    return CliRunner().invoke(app, [str(a) for a in args])


def said(result: Result) -> str:
    return " ".join(result.output.split())


@pytest.fixture
def missing(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every extra's package made unimportable (as if never installed)."""
    for module in OPTIONAL:
        monkeypatch.setitem(sys.modules, module, None)


def _requirement_names(requirements: list[str]) -> set[str]:
    return {r.split(">")[0].split("<")[0].split("=")[0].strip() for r in requirements}


def test_the_core_dependencies_leave_every_extra_out_and_dev_takes_them_all() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    core = _requirement_names(project["dependencies"])
    extras = project["optional-dependencies"]
    for extra, modules in EXTRAS.items():
        wanted = set(modules.values())
        assert wanted <= _requirement_names(extras[extra]), extra
        assert not wanted & core, f"the core installs what the {extra} extra is for"
    dev = " ".join(extras["dev"])
    for extra in ("llm", "engine", "postgres", "report", "numba", "ray"):
        assert extra in dev.split("swarmfab[", 1)[1].split("]", 1)[0].split(","), extra


def test_import_extra_names_the_extra_and_is_an_import_error() -> None:
    with pytest.raises(MissingExtraError) as raised:
        import_extra("swarmfab_no_such_package", "engine", "serving a model")
    assert isinstance(raised.value, ImportError) and isinstance(raised.value, SwarmfabError)
    assert str(raised.value) == ("serving a model needs swarmfab_no_such_package, which is "
                                 "not installed: pip install 'swarmfab[engine]'")


@pytest.mark.usefixtures("missing")
def test_commands_that_need_an_extra_name_it(tmp_path: Path) -> None:
    db = tmp_path / "store.db"
    cases = [
        (("dashboard", "--db", db), "swarmfab dashboard needs fastapi", "report"),
        (("report", "--out", tmp_path / "r.html", "--db", db),
         "the HTML report (report --out) needs matplotlib", "report"),
        (("serve", tmp_path), "swarmfab serve needs httpx", "engine"),
        (("loadgen",), "swarmfab loadgen needs httpx", "engine"),
        (("runs", "--db", "postgresql://fab:pw@127.0.0.1:9/fab"),
         "a PostgreSQL store needs psycopg", "postgres"),
    ]
    for args, words, extra in cases:
        result = invoke(*args)
        assert result.exit_code == 1, (args, result.output)
        assert words in said(result) and f"pip install 'swarmfab[{extra}]'" in said(result), (
            args, result.output)
        assert "Traceback" not in result.output


@pytest.mark.usefixtures("missing")
def test_an_engine_goal_names_the_engine_extra_before_any_work(tmp_path: Path) -> None:
    goal = tmp_path / "engine.toml"
    goal.write_text('kind = "engine"\nmodel = "ckpt"\n')
    result = invoke("run", goal, "--db", tmp_path / "x.db", "--workdir", tmp_path / "wd")
    assert result.exit_code == 1, result.output
    assert ("an engine goal (kind = \"engine\") needs httpx, which is not installed: "
            "pip install 'swarmfab[engine]'") in said(result)
    assert not (tmp_path / "x.db").exists()


@pytest.mark.usefixtures("missing")
def test_llm_agents_name_the_llm_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    from swarmfab.agents.llm.providers import make_provider
    from swarmfab.goal import LLMSettings

    monkeypatch.setenv("OPENAI_API_KEY", "k")
    with pytest.raises(MissingExtraError, match=r"pip install 'swarmfab\[llm\]'"):
        make_provider(LLMSettings(provider="openai", model="m"))


def test_the_core_commands_modules_import_without_any_extra(tmp_path: Path) -> None:
    """In a process of its own: what run, verify, bench, export, show, report, runs,
    refresh and suite import, with every extra's package unimportable."""
    code = f"""
import sys
for name in {OPTIONAL!r}:
    sys.modules[name] = None
from typer.testing import CliRunner
from swarmfab.cli import app
import swarmfab.swarm.launch, swarmfab.serving.goal, swarmfab.report.export
import swarmfab.report.scorecard, swarmfab.swarm.refresh, swarmfab.agents.llm
import swarmfab.swarm.ray_executor, swarmfab.engine.loadgen, swarmfab.report.serving_view
result = CliRunner().invoke(app, ["runs", "--db", sys.argv[1]])
assert result.exit_code == 0, result.output
"""
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path / "s.db")],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
