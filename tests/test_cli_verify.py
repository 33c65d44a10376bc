"""`swarmfab verify` on a file: built with the flags it records (a champion's own source
is the champion, same id), and a build failure shown once, with its diagnostics."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from swarmfab.backends.files import DEFAULT_C_FLAGS, candidate_from_file
from swarmfab.cli import app
from swarmfab.records import Candidate
from swarmfab.workloads import design_space

needs_cc = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
ZERO = "#include <stdint.h>\nint kda_forward(void) { return 0; }\n"


def _champion() -> Candidate:
    space = design_space("kda")
    return space.instantiate(space.default(), threads=1)


def test_an_exported_champions_source_is_the_champion(tmp_path: Path) -> None:
    """`swarmfab export` writes the flags into provenance.json beside the source."""
    champion = _champion()
    package = tmp_path / "kda_champion"
    package.mkdir()
    source = package / champion.entry
    source.write_text(champion.sources[champion.entry])
    (package / "provenance.json").write_text(json.dumps(
        {"candidate": champion.id, "entry": f"kda_champion/{champion.entry}",
         "flags": list(champion.flags)}))
    loaded = candidate_from_file("kda", source)
    assert loaded.flags == champion.flags and champion.flags != DEFAULT_C_FLAGS
    assert loaded.id == champion.id


def test_a_source_with_a_flags_header_is_built_with_those_flags(tmp_path: Path) -> None:
    champion = _champion()
    text = (f"/* swarmfab flags: {' '.join(champion.flags)} */\n"
            + champion.sources[champion.entry])
    recorded = Candidate("kda", "c", {champion.entry: text}, champion.entry,
                         flags=champion.flags)  # a champion whose source records its flags
    (tmp_path / champion.entry).write_text(text)
    assert candidate_from_file("kda", tmp_path / champion.entry).id == recorded.id
    (tmp_path / "plain.c").write_text(ZERO)  # no header, no provenance: the defaults
    assert candidate_from_file("kda", tmp_path / "plain.c").flags == DEFAULT_C_FLAGS


@needs_cc
def test_verify_builds_with_the_header_flags_and_shows_a_build_failure_once(
    tmp_path: Path,
) -> None:
    flags = ("-O2", "-fno-such-option-anywhere")
    kernel = tmp_path / "flagged.c"
    kernel.write_text(f"// swarmfab flags: {' '.join(flags)}\n{ZERO}")
    expected = Candidate("kda", "c", {kernel.name: kernel.read_text()}, kernel.name, flags=flags)
    result = CliRunner().invoke(app, ["verify", "kda", str(kernel), "--db",
                                      str(tmp_path / "x.db"), "--workdir", str(tmp_path / "wd")])
    assert result.exit_code == 1, result.output
    assert f"candidate {expected.id}: flagged.c (c; flags -O2 -fno-such-option-anywhere)" \
        in result.output
    assert "verdict: build_failed" in result.output
    assert result.output.count("unrecognized command-line option") == 1, result.output
    assert "┃ case" not in result.output


def test_verify_on_a_champions_own_source_names_the_champion(tmp_path: Path) -> None:
    """A rendered source carries its build flags, so the file alone is the champion."""
    from swarmfab.backends.files import candidate_from_file
    from swarmfab.workloads import design_space

    space = design_space("kda")
    setting = {**space.default(), "algorithm": "recurrent", "optimisation": "O2"}
    champion = space.instantiate(setting, threads=1)
    source = tmp_path / "champion" / champion.entry
    source.parent.mkdir()
    source.write_text(champion.sources[champion.entry])
    assert candidate_from_file("kda", source).id == champion.id


@needs_cc
@pytest.mark.slow  # the whole verification battery, in bfloat16
@pytest.mark.full_battery
def test_verify_in_bfloat16_judges_the_c_kernel_with_the_bfloat16_inputs(tmp_path: Path) -> None:
    champion = _champion()
    source = tmp_path / champion.entry
    source.write_text(champion.sources[champion.entry])
    common = ["--db", str(tmp_path / "x.db"), "--workdir", str(tmp_path / "wd"), "--fuzz", "1"]
    result = CliRunner().invoke(app, ["verify", "kda", str(source), "--dtype", "bfloat16",
                                      "--json", *common])
    assert result.exit_code == 0, result.output
    verdict = json.loads(result.output)
    assert verdict["status"] == "accepted"
    errors = [check["rms_ratio"] for check in verdict["checks"]
              if check["check"] == "o matches reference"]
    assert max(errors) > 1e-4  # o came back rounded to bfloat16, within its tolerance
    refused = CliRunner().invoke(app, ["verify", "kda", str(source), "--dtype", "float16",
                                       *common])
    assert refused.exit_code == 2 and "float16" in refused.output
