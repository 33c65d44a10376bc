"""What this host offers swarmfab, for ``swarmfab doctor``: the CPU and its vector ISA,
the compilers and OpenMP, torch, which isolation steps hold for a job (probed by
confining a child as a job is confined and trying what a hostile candidate would: for
this user and, from root, for an ordinary user too), Ray and PostgreSQL, the GPU and
Triton, and the caches with their sizes. Every finding is plain data (``--json``); a
missing tool is a finding, never an error.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import platform
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

__all__ = ["ORDINARY_USER", "doctor", "isolation", "lines"]

ORDINARY_USER = "nobody"  # whom root's probe runs as, for what an ordinary user gets
_OPENMP_PROGRAM = ("#include <omp.h>\n"
                   "int main(void) { return omp_get_max_threads() > 0 ? 0 : 1; }\n")


def doctor(workdir: Path = Path(".swarmfab")) -> dict[str, Any]:
    """Every finding, by section (``workdir``: the build cache and store to size)."""
    return {"host": host(), "compilers": compilers(), "torch": torch_facts(),
            "sandbox": isolation(), "ray": ray(), "postgresql": postgresql(),
            "gpu": gpu(), "caches": caches(workdir)}


def host() -> dict[str, Any]:
    from swarmfab.backends import host_isa
    from swarmfab.measure.roofline import cpu_model

    return {"machine": platform.machine(), "cpu": cpu_model(), "isa": host_isa(),
            "cores": len(os.sched_getaffinity(0)), "kernel": platform.release(),
            "python": platform.python_version(), "user": _user(), "root": os.geteuid() == 0}


def _user() -> str:
    try:
        return pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        return f"uid {os.geteuid()}"


def compilers() -> dict[str, Any]:
    """Each C compiler on PATH (and ``$CC``): its version and whether it builds OpenMP;
    nvcc's version where there is one."""
    names = dict.fromkeys([os.environ.get("CC") or "gcc", "gcc", "clang"])
    found: dict[str, Any] = {name: _c_compiler(name) for name in names}
    found["nvcc"] = _version("nvcc")
    return found


def _c_compiler(name: str) -> dict[str, Any] | None:
    version = _version(name)
    if version is None:
        return None
    with tempfile.TemporaryDirectory(prefix="swarmfab-doctor-") as scratch:
        source = Path(scratch) / "omp.c"
        source.write_text(_OPENMP_PROGRAM)
        try:
            built = subprocess.run([name, "-fopenmp", "-o", str(Path(scratch) / "omp"),
                                    str(source)], capture_output=True, text=True, timeout=60)
            openmp = built.returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            openmp = False
    return {"path": shutil.which(name), "version": version, "openmp": openmp}


def _version(program: str) -> str | None:
    if shutil.which(program) is None:
        return None
    try:
        done = subprocess.run([program, "--version"], capture_output=True, text=True,
                              timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = [line for line in (done.stdout or done.stderr).splitlines() if line.strip()]
    return (lines[-1] if program == "nvcc" else lines[0]) if lines else program


def torch_facts() -> dict[str, Any]:
    import torch

    return {"version": torch.__version__, "cuda build": torch.version.cuda,
            "threads": torch.get_num_threads()}


def isolation() -> dict[str, Any]:
    """The kernel's means (Landlock's ABI, unprivileged user namespaces, libseccomp) and
    what holds for a job: run by this user, and, when this is root, by an ordinary user
    (:data:`ORDINARY_USER`), whom the other steps then stand in for the drop."""
    from swarmfab.sandbox.probe import isolation_here, means

    found: dict[str, Any] = {"means": means()}
    found["this user"] = isolation_here()
    if os.geteuid() == 0:
        try:
            pwd.getpwnam(ORDINARY_USER)
        except KeyError:
            found["an ordinary user"] = {"error": f"no user {ORDINARY_USER!r} to probe as"}
        else:
            found["an ordinary user"] = isolation_here(ORDINARY_USER)
    else:
        found["root"] = {"error": "not tried: this process is not root"}
    return found


def _module(name: str) -> dict[str, Any]:
    """Whether ``name`` imports here, and its version."""
    try:
        module = importlib.import_module(name)
    except Exception as exc:  # any failure to import is a finding
        return {"importable": False, "why": f"{type(exc).__name__}: {exc}"[:200]}
    return {"importable": True, "version": getattr(module, "__version__", None)}


def ray() -> dict[str, Any]:
    return {**_module("ray"), "ray on PATH": shutil.which("ray")}


def postgresql() -> dict[str, Any]:
    """The driver, and the server's programs (on PATH or in Debian's versioned bin)."""
    programs = {}
    versioned = sorted(Path("/usr/lib/postgresql").glob("*/bin"))
    for name in ("initdb", "pg_ctl", "postgres", "psql"):
        where = shutil.which(name) or next(
            (str(d / name) for d in reversed(versioned) if (d / name).exists()), None)
        programs[name] = where
    return {"psycopg": _module("psycopg"), "programs": programs}


def gpu() -> dict[str, Any]:
    import torch

    found: dict[str, Any] = {"cuda available": torch.cuda.is_available(),
                             "nvidia-smi": shutil.which("nvidia-smi"),
                             "triton": _module("triton")}
    if torch.cuda.is_available():
        found["devices"] = [torch.cuda.get_device_name(i)
                            for i in range(torch.cuda.device_count())]
    return found


def caches(workdir: Path) -> dict[str, Any]:
    """swarmfab's cache in the user's cache directory (each entry and its size), the
    working directory's build cache and store, and where jobs' temporary files go."""
    from swarmfab.paths import user_cache

    root = user_cache("")
    entries = {}
    if root.is_dir():
        entries = {entry.name: _size(entry) for entry in sorted(root.iterdir())}
    return {"user cache": {"path": str(root), "bytes": _size(root), "entries": entries},
            "workdir": {"path": str(workdir.resolve()), "bytes": _size(workdir)},
            "temporary": {"path": tempfile.gettempdir(),
                          "free bytes": shutil.disk_usage(tempfile.gettempdir()).free}}


def _size(path: Path) -> int | None:
    """Bytes under ``path`` (None where it does not exist)."""
    if not path.exists():
        return None
    if path.is_file():
        return path.stat().st_size
    total = 0
    for directory, _, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(directory, name)).st_size
    return total


def lines(found: dict[str, Any]) -> list[str]:
    """The findings for a person, one line each."""
    out = [f"host: {found['host']['cpu']} ({found['host']['machine']}, "
           f"{found['host']['cores']} cores), kernel {found['host']['kernel']}, "
           f"Python {found['host']['python']}, user {found['host']['user']}",
           f"isa: {found['host']['isa']}"]
    for name, compiler in found["compilers"].items():
        if name == "nvcc":
            out.append(f"nvcc: {compiler or 'not found'}")
        elif compiler is None:
            out.append(f"{name}: not found")
        else:
            out.append(f"{name}: {compiler['version']}; OpenMP "
                       f"{'builds' if compiler['openmp'] else 'does not build'}")
    torch = found["torch"]
    out.append(f"torch: {torch['version']} (CUDA build: {torch['cuda build'] or 'none'})")
    sandbox = found["sandbox"]
    out.append("sandbox means: " + ", ".join(f"{k} {v}" for k, v in sandbox["means"].items()))
    for who, probed in sandbox.items():
        if who != "means":
            out.append(f"sandbox for {who}: {_describe(probed)}")
    ray = found["ray"]
    out.append(f"ray: {ray.get('version') if ray['importable'] else 'not importable'}")
    postgres = found["postgresql"]
    present = [name for name, where in postgres["programs"].items() if where]
    driver = "importable" if postgres["psycopg"]["importable"] else "missing"
    out.append(f"postgresql: driver {driver}; programs {', '.join(present) or 'none'}")
    gpu_found, triton = found["gpu"], found["gpu"]["triton"]
    out.append(f"gpu: {', '.join(gpu_found.get('devices', [])) or 'no CUDA device'}; triton "
               f"{triton.get('version') if triton['importable'] else 'not importable'}")
    cache = found["caches"]
    out.append(f"caches: {cache['user cache']['path']} {_bytes(cache['user cache']['bytes'])}"
               + "".join(f"; {name} {_bytes(size)}"
                         for name, size in cache["user cache"]["entries"].items())
               + f"; workdir {cache['workdir']['path']} {_bytes(cache['workdir']['bytes'])}")
    return out


def _describe(probed: dict[str, Any]) -> str:
    if "error" in probed:
        return str(probed["error"])
    parts = [str(probed["level"])]
    if probed["missing"]:
        parts.append(f"missing: {', '.join(probed['missing'])}")
    parts.append(f"held: {', '.join(probed['held']) or 'nothing'}")
    if probed["failed"]:
        parts.append(f"did not hold: {', '.join(probed['failed'])}")
    allowed = [name for name, got in probed["attempts"].items() if not got.startswith("refused")]
    parts.append(f"a hostile job could: {', '.join(allowed)}" if allowed
                 else "a hostile job was refused every attempt")
    return "; ".join(parts)


def _bytes(size: int | None) -> str:
    if size is None:
        return "(none)"
    scaled, unit = float(size), "B"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if scaled < 1024 or unit == "GiB":
            break
        scaled /= 1024
    return f"{size} B" if unit == "B" else f"{scaled:.1f} {unit}"

