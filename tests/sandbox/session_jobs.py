"""Jobs for the session tests (module-level so the forkserver can import them)."""

from __future__ import annotations

import os
import time

from swarmfab.sandbox import Channel


def echo(channel: Channel, prefix: str) -> str:
    """Answer every request with ``prefix`` + request, until ``"quit"``; do as asked
    on ``"raise"``, ``"die"`` and ``"hang"``."""
    answered = 0
    while True:
        request = channel.receive()
        if request == "quit":
            return f"answered {answered}"
        if request == "raise":
            raise RuntimeError("asked to raise")
        if request == "die":
            os._exit(7)
        if request == "hang":
            time.sleep(3600)
        if request == "pid":
            channel.reply(os.getpid())
        else:
            channel.reply(prefix + str(request))
        answered += 1
