"""Jobs that compile with Inductor start warm: the base cache, precompiled headers included."""

from __future__ import annotations

import getpass
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from swarmfab.evaluation._inductor_base import base_cache, linked_headers, staged_base
from swarmfab.sandbox import JobStatus, Limits, job_user, run_job

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(torch.version.cuda is not None, reason="Inductor on the CPU")]


def compile_and_list_headers(stamps: dict[str, int]) -> list[tuple[str, bool]]:
    """Compile a small function; then each file in Inductor's precompiled-header
    directory, and whether it came from the base cache (a link to it, or, for a job
    whose user could not read the cache in place, a copy its parent made, with the
    cache's modification time in ``stamps``) rather than built here."""
    compiled = torch.compile(lambda x: torch.softmax(x * 2, dim=-1))
    with torch.no_grad():
        compiled(torch.randn(4, 8))
    user = getpass.getuser()
    headers = Path(os.environ["TMPDIR"]) / f"torchinductor_{user}" / "precompiled_headers"
    return sorted((path.name, path.is_symlink() or
                   path.stat().st_mtime_ns == stamps.get(path.name))
                  for path in headers.glob("*.h*"))


def test_a_compiling_job_builds_no_precompiled_header_of_its_own(tmp_path: Path) -> None:
    """The header every kernel includes takes 7 s to build on 2 cores; a job that built
    it again (a torch that moved where it looks) would pay that on every compile."""
    user = job_user(isolate=True)
    base = base_cache(tmp_path / "cache", user=user)
    assert base is not None, "the base cache could not be made"
    links = linked_headers(base, user)
    assert links, "the base cache kept no precompiled header"
    stamps = {source.name: source.stat().st_mtime_ns for source in links.values()}
    outcome = run_job(compile_and_list_headers, stamps, stage=staged_base(base), links=links,
                      limits=Limits(wall_s=300, allow_processes=True, file_bytes=2**31))
    assert outcome.status is JobStatus.OK, outcome.detail + outcome.output_tail
    headers = dict(outcome.value)
    assert headers, "the job compiled without any precompiled header"
    built = [name for name, linked in headers.items() if not linked]
    assert not built, f"the job built its own precompiled header(s): {built}"


# base_cache with the warming itself replaced by a slow stand-in that logs each call
TWO_AT_ONCE = """
import shutil, sys, time
from pathlib import Path
from swarmfab.evaluation import _inductor_base as base

def warm(scratch, final, cores, user):
    with open(sys.argv[2], "a") as log:
        log.write("warmed\\n")
    time.sleep(1.5)
    (scratch / base._READY).write_text("stand-in")
    if final.exists():  # as the real one does: another process finished first
        shutil.rmtree(scratch)
    else:
        scratch.rename(final)
    return final

base._warm = warm
print(base.base_cache(Path(sys.argv[1])))
"""


def test_processes_that_need_the_base_cache_at_once_warm_it_once(tmp_path: Path) -> None:
    """Two runs started together on a fresh host (or two test workers) would each spend
    20-40 s of both cores warming the same cache; the second waits for the first."""
    log = tmp_path / "warmed.log"
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "xdg")}
    runs = [subprocess.Popen([sys.executable, "-c", TWO_AT_ONCE, str(tmp_path / "cache"),
                              str(log)], env=env, stdout=subprocess.PIPE, text=True)
            for _ in range(2)]
    places = {run.communicate(timeout=120)[0].strip() for run in runs}
    assert [run.returncode for run in runs] == [0, 0]
    assert len(places) == 1 and (Path(places.pop()) / "READY").exists()
    assert log.read_text().splitlines() == ["warmed"]
