"""An exported champion built ahead of time: its library compiled with the flags it was
verified with, and a platform wheel that installs without a compiler.

The library stays plain C with a C ABI (called through ctypes by the package's PyTorch
operators), so it depends on no libtorch interface and one wheel serves any torch the
package supports: its tag is ``py3-none-<platform>``. It needs GCC's OpenMP runtime
(``libgomp.so.1``), which every Linux with GCC's runtime libraries has, and which the
package names in its error if the library cannot load.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from swarmfab.errors import SwarmfabError
from swarmfab.records import Candidate

__all__ = ["SETUP_PY", "build_library", "build_wheel"]

LIBRARY = "kernel.so"
SETUP_PY = '''"""A platform wheel (py3-none-<platform>): the package carries a C library."""
from setuptools import setup
from setuptools.dist import Distribution

try:
    from setuptools.command.bdist_wheel import bdist_wheel
except ImportError:  # setuptools before 70.1
    from wheel.bdist_wheel import bdist_wheel


class _Binary(Distribution):
    def has_ext_modules(self):
        return True


class _PlatformWheel(bdist_wheel):
    def get_tag(self):
        return "py3", "none", super().get_tag()[2]


setup(distclass=_Binary, cmdclass={"bdist_wheel": _PlatformWheel})
'''


def build_library(package_dir: Path, champion: Candidate) -> Path:
    """``kernel.so`` beside the champion's source in ``package_dir``, compiled with the
    flags it was verified with."""
    compiler = os.environ.get("CC") or shutil.which("gcc") or shutil.which("cc")
    if compiler is None:
        raise SwarmfabError("exporting builds the champion's library: no C compiler (gcc or "
                            "cc, or $CC) on this host")
    target = package_dir / LIBRARY
    command = [compiler, *champion.flags, "-fPIC", "-shared", "-fopenmp", "-std=gnu11",
               "-o", str(target), str(package_dir / champion.entry), "-lm"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
    if done.returncode != 0:
        raise SwarmfabError(f"building the champion's library failed: {done.stderr[-2000:]}")
    return target


def build_wheel(project: Path) -> Path:
    """The platform wheel of the exported project in ``project`` (under ``project/dist``):
    with this environment's setuptools where it can build one, else in an isolated build
    environment (pip fetches setuptools)."""
    dist = project / "dist"
    failures = []
    for isolation in (["--no-build-isolation"], []):
        done = subprocess.run(
            [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", *isolation,
             "--wheel-dir", str(dist.resolve()), str(project.resolve())],  # a path, not a name
            capture_output=True, text=True, timeout=600, check=False)
        for scratch in (project / "build", *project.glob("*.egg-info")):
            shutil.rmtree(scratch, ignore_errors=True)  # setuptools' leftovers
        wheels = sorted(dist.glob("*.whl"))
        if done.returncode == 0 and wheels:
            return wheels[-1]
        failures.append(done.stderr.strip().splitlines()[-1:] or ["no wheel"])
    raise SwarmfabError("building the champion's wheel failed: "
                        + "; ".join(line for lines in failures for line in lines))
