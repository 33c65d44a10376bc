"""What the tests that run the sandbox as someone else need: an unprivileged user made
for them (as root), an interpreter every user can reach, and a way to run a script as
that user. Nothing here is copied: the interpreter is a virtual environment of the
system's Python of the same version, reaching this environment's packages where they
lie (they must be readable by others, as an installation's are)."""

from __future__ import annotations

import os
import pwd
import shutil
import site
import stat
import subprocess
import sys
import sysconfig
from pathlib import Path

TEST_USER = "swarmfab-sandbox-test"
HERE = Path(__file__).parent


def reachable(path: Path) -> bool:
    """Whether a user without rights can enter every directory down to ``path``."""
    path = path.resolve()
    try:
        return all(d.stat().st_mode & stat.S_IXOTH for d in [*path.parents, path]
                   if d.is_dir())
    except OSError:
        return False


def _packages() -> list[Path]:
    return [Path(p) for p in {*site.getsitepackages(), sysconfig.get_paths()["purelib"]}
            if Path(p).is_dir()]


def reachable_python(where: Path) -> Path | None:
    """An interpreter every user can run, with this one's packages: this one where every
    user reaches it already; else a virtual environment in ``where`` (a directory every
    user reaches) of the system's Python of this version, whose ``site-packages`` add
    this environment's (their ``.pth`` files too). None where neither can be had."""
    packages = _packages()
    if not all(reachable(p) for p in [*packages, HERE]):
        return None
    if reachable(Path(sys.executable)) and reachable(Path(os.__file__).parent):
        return Path(sys.executable)
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    base = shutil.which(version, path="/usr/local/bin:/usr/bin:/bin")
    if base is None or not reachable(Path(base)):
        return None
    venv = where / "venv"
    made = subprocess.run([base, "-m", "venv", "--without-pip", str(venv)],
                          capture_output=True, text=True, timeout=120, check=False)
    if made.returncode != 0:
        return None
    lines = "; ".join(f"site.addsitedir({str(p)!r})" for p in packages)
    (venv / "lib" / version / "site-packages" / "swarmfab-reach.pth").write_text(
        f"import site; {lines}\n")
    for path in [where, *where.rglob("*")]:
        if path.is_dir() and not path.is_symlink():
            path.chmod(0o755)
    return venv / "bin" / "python"


def make_test_user() -> str | None:
    """:data:`TEST_USER` (made as a system user without a home where missing), as root;
    None where it cannot be had."""
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam(TEST_USER)
        return TEST_USER
    except KeyError:
        pass
    if shutil.which("useradd") is None:
        return None
    subprocess.run(["useradd", "--system", "--no-create-home", "--home-dir", "/nonexistent",
                    "--shell", "/usr/sbin/nologin", TEST_USER],
                   capture_output=True, timeout=60, check=False)
    try:  # made here, or by a test running beside this one
        pwd.getpwnam(TEST_USER)
    except KeyError:
        return None
    return TEST_USER


def run_as(user: str | None, python: Path, script: str, *args: str,
           env: dict[str, str], timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """Run ``python`` on ``script`` (a file beside this one) as ``user`` (None: as this
    process's user), with only ``env`` in its environment."""
    command = [str(python), str(HERE / script), *args]
    if user is not None:
        runner = shutil.which("runuser")
        command = ([runner, "-u", user, "--", *command] if runner else
                   ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups",
                    *command])
    return subprocess.run(["env", "-i", *(f"{k}={v}" for k, v in env.items()), *command],
                          capture_output=True, text=True, timeout=timeout, check=False,
                          cwd="/")
