"""``swarmfab doctor``: what this host offers swarmfab, the sandbox's isolation above all."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from swarmfab.cli._common import JsonOption, console, friendly

__all__ = ["doctor"]


@friendly
def doctor(
    as_json: JsonOption = False,
    workdir: Annotated[Path, typer.Option(help="Build cache and store to size.")] = Path(
        ".swarmfab"),
) -> None:
    """This host: CPU and ISA, compilers and OpenMP, torch, which isolation steps hold for
    a job (tried for real: a child confined as a job is, for this user and, from root,
    for an ordinary user, attempting what a hostile candidate would), Ray, PostgreSQL,
    GPU and Triton, caches and their sizes."""
    from swarmfab.swarm.doctor import doctor as examine
    from swarmfab.swarm.doctor import lines

    found = examine(workdir)
    if as_json:
        print(json.dumps(found, indent=2, default=str))
        return
    for line in lines(found):
        console.print(line, highlight=False, markup=False)
