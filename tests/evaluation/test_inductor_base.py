"""Jobs that compile with Inductor start warm: the base cache, precompiled headers included."""

from __future__ import annotations

import getpass
import os
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
