"""A warm start for jobs that compile with Inductor (``torch.compile`` on the CPU).

Inductor's first compilation in an empty cache spends most of its time on work that
does not depend on the model (checking which vector ISAs the C++ compiler and CPU
support, building the pieces every kernel links against): on a 2-core host, 23 s cold
against 7 s with a cache another model had filled. Every sandboxed job starts with an
empty cache of its own, so each would pay that again. The largest piece is the
precompiled header every kernel includes (150 MB, 7 s to build on 2 cores), which
Inductor keeps apart from its cache, under ``$TMPDIR/torchinductor_<user>``.

:func:`base_cache` fills a cache once per torch version and host (in the user's cache,
shared by every working directory), in a trusted process that compiles a small function
of ours (no candidate code), with the precompiled headers kept in it too.
:func:`staged_base` hands the cache's files to a job as a *copy* in the job's own cache
directory, and :func:`linked_headers` the headers as links where the job's Inductor
looks for them (the job's file system is read-only but for its own directory). Nothing
a job writes ever comes back, so no candidate can plant a kernel that another job (or a
baseline) would load.
"""

from __future__ import annotations

import fcntl
import getpass
import hashlib
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import torch

from swarmfab.paths import user_cache

__all__ = ["base_cache", "linked_headers", "staged_base"]

JOB_CACHE = Path(".cache") / "inductor"  # where a job's TORCHINDUCTOR_CACHE_DIR points
WARM_TIMEOUT_S = 600.0
_READY = "READY"
_HEADERS = "headers"  # in a base cache: Inductor's precompiled headers
_LAYOUT = 2  # of a base cache (2: with the precompiled headers)
_lock = threading.Lock()

# matmul, reductions, elementwise and a softmax, at two shapes (static, then dynamic),
# with Python's wrapper and with C++'s (each has its own precompiled header)
_WARM = """
import torch
import torch._inductor.config as inductor
inductor.compile_threads = 1
torch.set_num_threads(1)

def f(x, w):
    y = torch.softmax(x @ w, dim=-1)
    return torch.nn.functional.gelu(y) * x.sigmoid() + x.sum(dim=-1, keepdim=True)

for cpp_wrapper in (False, True):
    torch._dynamo.reset()
    g = torch.compile(f, options={"cpp_wrapper": cpp_wrapper})
    with torch.no_grad():
        for rows in (16, 24):
            g(torch.randn(rows, 32), torch.randn(32, 32))
"""


def base_cache(cache_dir: Path, cores: tuple[int, ...] = (), user: str = "") -> Path | None:
    """The warm base cache (made on first use, ~20-40 s, on ``cores`` where given, by
    one process at a time: another that needs it meanwhile waits, then takes it):
    in the user's cache, so every working directory on this host shares one, else under
    ``cache_dir``; None where it cannot be made (jobs then start cold). One per torch
    installation: the precompiled headers are only valid for the include paths they were
    built with (two environments with the same torch version would not share them); and
    one per job ``user`` (default: this process's), whose name Inductor writes into its
    headers (a root parent's jobs dropped to nobody look for nobody's)."""
    own = getpass.getuser()
    user = user or own
    machine = re.sub(r"[^A-Za-z0-9.+-]+", "_", f"{platform.machine()}-{_cpu_model()}")
    where = hashlib.sha256(str(Path(torch.__file__).resolve().parent).encode()).hexdigest()
    name = f"torch-{torch.__version__}-{machine}-{where[:10]}-{_LAYOUT}"
    if user != own:
        name += f"-for-{re.sub(r'[^A-Za-z0-9_]', '_', user)}"
    places = [user_cache("inductor-base") / name,
              cache_dir.resolve() / "inductor-base" / name]
    with _lock:
        for final in places:
            if (final / _READY).exists():
                return final
        for final in places:
            try:
                final.parent.mkdir(parents=True, exist_ok=True)
                lock = os.open(final.parent / f"{final.name}.lock", os.O_RDWR | os.O_CREAT,
                               0o666)
            except OSError:
                continue  # not writable: the next place
            try:  # one process warms; the others wait for it and take its cache
                fcntl.flock(lock, fcntl.LOCK_EX)
                if (final / _READY).exists():
                    return final
                scratch = Path(tempfile.mkdtemp(prefix="warming-", dir=final.parent))
                return _warm(scratch, final, cores, user)
            except OSError:
                continue
            finally:
                os.close(lock)  # and with it the lock
    return None


def _warm(scratch: Path, final: Path, cores: tuple[int, ...], user: str) -> Path | None:
    """Compile :data:`_WARM` with ``scratch`` as the cache (as ``user`` names itself,
    where Inductor reads the name), keep the precompiled headers it made, then move it
    to ``final`` (atomically: another process may be warming the same place)."""
    temporary = scratch / "tmp"
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(scratch), "TMPDIR": str(temporary),
           "USER": user, "LOGNAME": user}
    try:
        temporary.mkdir()
        pin = f"import os\nos.sched_setaffinity(0, {set(cores)!r})\n" if cores else ""
        subprocess.run([sys.executable, "-c", pin + _WARM], env=env, cwd=scratch,
                       timeout=WARM_TIMEOUT_S, check=True, capture_output=True)
        headers = scratch / _HEADERS
        headers.mkdir()
        for header in temporary.glob("torchinductor_*/precompiled_headers/*.h*"):
            header.chmod(0o444)
            os.replace(header, headers / header.name)
        shutil.rmtree(temporary)
        (scratch / _READY).write_text(torch.__version__)
        if final.exists():  # another process finished first
            shutil.rmtree(scratch)
        else:
            os.replace(scratch, final)
    except (OSError, subprocess.SubprocessError):
        shutil.rmtree(scratch, ignore_errors=True)
        return final if (final / _READY).exists() else None
    return final


def staged_base(base: Path | None) -> dict[str, Path]:
    """The base cache's files, as a job's stage (relative name in the job -> file)."""
    if base is None:
        return {}
    return {str(JOB_CACHE / path.relative_to(base)): path
            for path in base.rglob("*")
            if path.is_file() and path.name != _READY and path.parent.name != _HEADERS}


def linked_headers(base: Path | None, user: str) -> dict[str, Path]:
    """The base cache's precompiled headers, where Inductor in a job run by ``user``
    looks for them (``$TMPDIR/torchinductor_<user>/precompiled_headers``, the job's
    TMPDIR being its working directory): relative name in the job -> file."""
    if base is None:
        return {}
    where = Path("torchinductor_" + re.sub(r'[\\/:*?"<>|]', "_", user)) / "precompiled_headers"
    return {str(where / path.name): path for path in (base / _HEADERS).glob("*.h*")}


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"
