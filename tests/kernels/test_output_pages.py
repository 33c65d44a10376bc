"""The delta templates' ``output_pages`` knob: what each value does to a fresh output's
pages before the kernel writes a value, and the shapes where it does nothing."""

from __future__ import annotations

import ctypes
import mmap
import shutil
import subprocess
import sys
from importlib import resources
from pathlib import Path

import pytest

from swarmfab.kernels.delta import _OUTPUT_PAGES
from swarmfab.workloads import Shape, design_space

pytestmark = [
    pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc"),
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="madvise and mincore"),
]

PAGE = mmap.PAGESIZE

# common.h with a template body that only advises the outputs: what is mapped after the
# call was mapped by the advice, since nothing is written
STUB_BODY = """
static int delta_run(const delta_args *a)
{
    advise_outputs(a, 2);
    return 0;
}
"""


def _stub(tmp_path: Path, mode: str) -> ctypes.CDLL:
    common = resources.files("swarmfab.kernels.delta").joinpath("common.h").read_text()
    source = tmp_path / f"stub-{mode}.c"
    source.write_text(f"#define DELTA_OUTPUT_PAGES {_OUTPUT_PAGES[mode]}\n{common}{STUB_BODY}")
    library = tmp_path / f"stub-{mode}.so"
    subprocess.run(["gcc", "-O2", "-fopenmp", "-fPIC", "-shared", "-o", str(library),
                    str(source)], check=True, capture_output=True, timeout=120)
    return ctypes.CDLL(str(library))


def _mapped_after_call(stub: ctypes.CDLL, o_bytes: int) -> tuple[int, int]:
    """(pages mapped, pages) of a fresh anonymous output of ``o_bytes`` after the call."""
    region = mmap.mmap(-1, o_bytes)
    anchor = ctypes.c_char.from_buffer(region)
    try:
        address = ctypes.addressof(anchor)
        values = o_bytes // 4
        null = ctypes.c_void_p()
        status = stub.kda_forward(null, null, null, null, null, null, ctypes.c_void_p(address),
                                  null, ctypes.c_float(1.0), *(ctypes.c_int64(n) for n in
                                                               (1, values // 64, 1, 1, 64, 64)))
        assert status == 0
        pages = o_bytes // PAGE
        resident = (ctypes.c_ubyte * pages)()
        libc = ctypes.CDLL(None, use_errno=True)
        assert libc.mincore(ctypes.c_void_p(address), ctypes.c_size_t(o_bytes), resident) == 0
        return sum(byte & 1 for byte in resident), pages
    finally:
        del anchor
        region.close()


def test_populated_outputs_are_mapped_before_a_value_is_written(tmp_path: Path) -> None:
    stubs = {mode: _stub(tmp_path, mode) for mode in _OUTPUT_PAGES}
    mapped, pages = _mapped_after_call(stubs["populated"], 8 * 2**20)
    assert mapped == pages  # every page, by the call's threads, 2 MB each
    for mode in ("small", "huge"):  # faulted in as written; 2 MB pages are only asked for
        assert _mapped_after_call(stubs[mode], 8 * 2**20)[0] == 0, mode
    # under 2 MiB an output is malloc's heap, mapped once and reused: left as it is
    assert _mapped_after_call(stubs["populated"], 2**20)[0] == 0


def test_output_pages_is_inert_where_every_output_is_under_2_mib() -> None:
    space = design_space("kda")
    setting = {**space.default(), "algorithm": "recurrent"}
    pooled_decode = Shape(64, 1, 16, 16, 128, 128, initial_state=True, pool=64)
    assert "output_pages" in space.inert(setting, pooled_decode)  # the pool is in place
    fresh_states = Shape(64, 1, 16, 16, 128, 128, initial_state=True)  # 64 MiB of states
    assert "output_pages" not in space.inert(setting, fresh_states)
    assert "output_pages" not in space.inert(setting, Shape(1, 4096, 16, 16, 128, 128))
    assert "output_pages" in space.inert(setting, Shape(2, 256, 4, 4, 64, 64, True))
    populated = {**setting, "output_pages": "populated"}
    assert space.same_code_on(setting, populated, pooled_decode)
    assert not space.same_code_on(setting, populated, fresh_states)
