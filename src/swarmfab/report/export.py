"""Export a run's champion as an installable Python package with its evidence.

    DIR/
      pyproject.toml          pip install DIR
      README.md, VERIFICATION.md, provenance.json
      <name>/__init__.py      forward(...) with the workload's signature
      <name>/<source>.c       built for the host on first import
      <name>/provenance.json, <name>/VERIFICATION.md

``provenance.json`` holds the goal, host fingerprint, compiler, flags, knobs, the full
verdict, the final side-by-side figures and the champion's lineage.
"""

from __future__ import annotations

import json
import re
from importlib import resources
from pathlib import Path
from typing import Any

from swarmfab.errors import StoreError, SwarmfabError
from swarmfab.knowledge import Store
from swarmfab.records import Candidate, Verdict
from swarmfab.report.run_view import LineageStep, load_run_view
from swarmfab.report.wheel import SETUP_PY, build_library, build_wheel

__all__ = ["export_champion", "write_package"]

# what -march=native may use from the verifying host, and code written for it may need
_VECTOR_FEATURES = ("sse4_2", "avx", "avx2", "fma", "avx512f", "avx512bw", "avx512vl",
                    "avx512dq", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16",
                    "amx_int8")
_NAME = re.compile(r"^[a-z_][a-z0-9_]*$")


def export_champion(store: Store, run_id: str | None, out: Path, name: str | None = None) -> Path:
    """Write the champion of ``run_id`` (latest run if None) as a package into ``out``."""
    run = store.run(run_id)
    if run.champion_id is None:
        raise StoreError(f"run {run.id} has no champion to export (status: {run.status})")
    champion = store.candidate(run.champion_id)
    if champion.backend == "engine-recipe":
        from swarmfab.serving.export import export_recipe

        return export_recipe(store, run, champion, out, name)
    if champion.backend == "torch-module":
        return _export_module(store, run, champion, out)
    if champion.backend != "c":
        raise SwarmfabError(f"exporting a {champion.backend} champion is not supported yet; "
                            "its source is under .swarmfab/runs/")
    package = name or f"{run.workload}_champion"
    if not _NAME.match(package):
        raise SwarmfabError(f"--name {package!r}: use lower-case letters, digits and _")
    verdict = next(v for row, v in store.verdicts(run.id) if row.candidate_id == champion.id)
    battery = _battery(store, run.id, champion.id)
    target = out / package
    target.mkdir(parents=True, exist_ok=True)
    required = _required_features(str(run.host.get("isa", "")))
    view = load_run_view(store, run.id)
    provenance = {
        "run": run.id, "workload": run.workload, "goal": run.goal, "host": run.host,
        "host_fingerprint": view.peaks.fingerprint if view.peaks else None,
        "compiler": run.host.get("compiler"),
        "candidate": champion.id, "backend": champion.backend,
        "entry": f"{package}/{champion.entry}", "flags": list(champion.flags),
        "knobs": champion.knobs, "required_cpu_features": required,
        "build": _build_command(package, champion), "verdict": verdict.to_dict(),
        "final_measurement": run.summary,
        "lineage": [step.to_dict() for step in reversed(view.lineage)],  # champion first
        "battery": battery,
    }
    text = json.dumps(provenance, indent=2, default=str)
    evidence = _verification_markdown(run.id, run.workload, champion, verdict, run.summary,
                                      view.lineage)
    evidence += _battery_section(battery, run.workload, champion.entry)
    for directory in (out, target):
        (directory / "provenance.json").write_text(text)
        (directory / "VERIFICATION.md").write_text(evidence)
    write_package(target, run, champion, required)
    (out / "pyproject.toml").write_text(_pyproject(package, run.workload))
    (out / "setup.py").write_text(SETUP_PY)
    (out / "README.md").write_text(
        f"# {package}\n\nA verified {run.workload} kernel exported by swarmfab (run {run.id}).\n"
        f"`pip install dist/*.whl` (no compiler needed; GCC's OpenMP runtime, libgomp.so.1) "
        f"or `pip install .`, then `import {package}; {package}.forward(...)`, or call "
        f"`torch.ops.{package}.forward` (traced by torch.compile). "
        "Evidence: VERIFICATION.md, provenance.json.\n"
    )
    try:
        build_wheel(out)
    except SwarmfabError as exc:  # the package stands without it: `pip install DIR`
        (out / "README.md").write_text((out / "README.md").read_text()
                                       + f"\nNo wheel was built at export: {exc}\n")
    return out


def _export_module(store: Store, run: Any, champion: Candidate, out: Path) -> Path:
    """A problem's champion: its ModelNew file as it was verified, with the evidence."""
    verdict = next(v for row, v in store.verdicts(run.id) if row.candidate_id == champion.id)
    battery = _battery(store, run.id, champion.id)
    view = load_run_view(store, run.id)
    out.mkdir(parents=True, exist_ok=True)
    (out / champion.entry).write_text(champion.sources[champion.entry])
    provenance = {
        "run": run.id, "workload": run.workload, "goal": run.goal, "host": run.host,
        "candidate": champion.id, "backend": champion.backend, "entry": champion.entry,
        "knobs": champion.knobs, "verdict": verdict.to_dict(),
        "final_measurement": run.summary,
        "lineage": [step.to_dict() for step in reversed(view.lineage)],
        "battery": battery,
    }
    (out / "provenance.json").write_text(json.dumps(provenance, indent=2, default=str))
    (out / "VERIFICATION.md").write_text(_verification_markdown(
        run.id, run.workload, champion, verdict, run.summary, view.lineage)
        + _battery_section(battery, run.workload, champion.entry))
    module = Path(champion.entry).stem
    (out / "README.md").write_text(
        f"# ModelNew for {run.workload}\n\nVerified and timed by swarmfab (run {run.id}). "
        f"`from {module} import ModelNew`, then build it with the same arguments as `Model` "
        "and load `Model`'s weights into it by name (`load_state_dict`): the first call "
        "prepares the fast path. Evidence: VERIFICATION.md, provenance.json.\n")
    return out


def _required_features(isa: str) -> list[str]:
    present = set(isa.split())
    return [feature for feature in _VECTOR_FEATURES if feature in present]


def write_package(target: Path, run: Any, champion: Candidate,
                  required: list[str] | None = None) -> Path:
    """A C champion as an importable package in ``target`` (its name the package's): its
    sources, ``__init__.py`` (:func:`init_source`; ``run`` needs ``workload`` and ``id``)
    and its library, built with the flags it was verified with, so no compiler is needed
    where it serves."""
    target.mkdir(parents=True, exist_ok=True)
    for rel, text in champion.sources.items():
        (target / rel).write_text(text)
    (target / "__init__.py").write_text(init_source(target.name, run, champion,
                                                    required or []))
    build_library(target, champion)
    return target


def init_source(package: str, run: Any, champion: Candidate, required: list[str]) -> str:
    template = resources.files("swarmfab.report").joinpath("templates/package_init.py.tmpl")
    per_channel = run.workload == "kda"
    return template.read_text().format(
        name=package, workload=run.workload, run=run.id, candidate=champion.id,
        entry=champion.entry, flags=tuple(champion.flags), required=tuple(required),
        symbol=f"{run.workload}_forward",
        gate_layout="[B,T,HV,K]" if per_channel else "[B,T,HV]",
    )


def _pyproject(package: str, workload: str) -> str:
    return f'''[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "{package.replace("_", "-")}"
version = "1.0.0"
description = "A verified {workload} kernel exported by swarmfab"
requires-python = ">=3.9"
dependencies = ["torch"]

[tool.setuptools]
packages = ["{package}"]

[tool.setuptools.package-data]
"{package}" = ["*.c", "*.so", "*.json", "*.md"]
'''


def _build_command(package: str, candidate: Candidate) -> str:
    flags = " ".join(candidate.flags)
    return (f"cc {flags} -fPIC -shared -fopenmp -std=gnu11 -o kernel.so "
            f"{package}/{candidate.entry} -lm")


def _battery_section(battery: str | None, workload: str, entry: str) -> str:
    return ("\n## The battery (the second tier, before the crowning)\n\n"
            + (battery or "not run: crowned before the battery existed; "
               f"`swarmfab verify {workload} {entry}` runs it") + "\n")


def _battery(store: Store, run_id: str, candidate_id: str) -> str | None:
    """What the battery said of ``candidate_id`` before its crowning in ``run_id``."""
    said = [detail for _, detail in store.events(run_id, "battery")
            if detail.startswith(f"{candidate_id} ")]
    return said[-1].removeprefix(f"{candidate_id} ") if said else None


def _verification_markdown(
    run_id: str, workload: str, champion: Candidate, verdict: Verdict,
    summary: dict[str, Any] | None, lineage: list[LineageStep],
) -> str:
    lines = [
        f"# Verification of {workload} candidate {champion.id}",
        "",
        f"Run {run_id}. Verdict: **{verdict.status.value}** — {verdict.reason}.",
        "",
        "## Final measurement (champion vs PyTorch baselines, side by side)",
        "",
        "| shape | fastest baseline | baseline ms | champion ms | speedup [95% CI] |",
        "| --- | --- | --- | --- | --- |",
    ]
    for shape in (summary or {}).get("shapes", []):
        base = shape["seconds"][shape["fastest_baseline"]]
        mine = shape["seconds"]["champion"]
        low, mid, high = shape["speedup"][1], shape["speedup"][0], shape["speedup"][2]
        lines.append(f"| {shape['shape']} | {shape['fastest_baseline']} | {base[0] * 1e3:.3f} "
                     f"| {mine[0] * 1e3:.3f} | {mid:.2f}x [{low:.2f}, {high:.2f}] |")
    lines += ["", "## Lineage (root first): what each step changed and gained", "",
              "| step | candidate | agent | change | gain over the incumbent then [95% CI] |",
              "| --- | --- | --- | --- | --- |"]
    for number, step in enumerate(lineage, start=1):
        change = "; ".join(f"{k}: {old} -> {new}" for k, (old, new) in step.changed.items())
        gains = "; ".join(f"{shape}: {g.median:.2f}x [{g.low:.2f}, {g.high:.2f}]"
                          for shape, g in step.gains) or "not judged in this run"
        lines.append(f"| {number} | {step.candidate_id} | {step.agent} | {step.rationale}"
                     f"{' (' + change + ')' if change else ''} | {gains} |")
    lines += ["", "## Checks", "", "| case | check | result | detail |",
              "| --- | --- | --- | --- |"]
    for check in verdict.checks:
        lines.append(f"| {check.case} | {check.check} | {'pass' if check.passed else 'FAIL'} "
                     f"| {check.detail} |")
    return "\n".join(lines) + "\n"
