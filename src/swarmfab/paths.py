"""Where swarmfab keeps what outlives one run and one working directory."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["user_cache"]


def user_cache(name: str) -> Path:
    """``name`` under the user's cache (``$XDG_CACHE_HOME/swarmfab``, else
    ``~/.cache/swarmfab``): files that depend only on the host and the installed
    versions, shared by every working directory. Callers fall back to a place of their
    own where it cannot be written."""
    root = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(root) / "swarmfab" / name
