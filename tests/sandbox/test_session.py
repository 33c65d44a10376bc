"""Sessions: a sandboxed job that serves requests until closed, and every way it ends."""

from __future__ import annotations

import threading
import time

import pytest
import session_jobs

from swarmfab.sandbox import JobStatus, Limits, SessionEnded, start_session


def test_a_session_answers_requests_in_order_and_close_ends_its_process() -> None:
    with start_session(session_jobs.echo, "re:", name="echo") as session:
        assert [session.ask(n) for n in range(3)] == ["re:0", "re:1", "re:2"]
        session.send("a")
        session.send("b")
        assert (session.reply(), session.reply()) == ("re:a", "re:b")
        pid = session.ask("pid")
    deadline = time.monotonic() + 5
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(pid)


@pytest.mark.parametrize(("request_", "status", "detail"), [
    ("raise", JobStatus.ERROR, "RuntimeError: asked to raise"),
    ("die", JobStatus.CRASHED, "status 7"),
])
def test_a_session_that_fails_ends_naming_itself(request_: str, status: JobStatus,
                                                 detail: str) -> None:
    session = start_session(session_jobs.echo, "", name="the candidate")
    with pytest.raises(SessionEnded) as ended:
        session.ask(request_)
    assert ended.value.outcome.status is status
    assert ended.value.outcome.detail.startswith("the candidate's process: ")
    assert detail in ended.value.outcome.detail


def test_the_wall_limit_bounds_the_whole_session() -> None:
    session = start_session(session_jobs.echo, "", limits=Limits(wall_s=2.0))
    session.ask("warm")
    started = time.monotonic()
    with pytest.raises(SessionEnded) as ended:
        session.ask("hang")
    assert ended.value.outcome.status is JobStatus.TIMED_OUT
    assert time.monotonic() - started < 4.0


def test_cancelling_ends_a_waiting_session() -> None:
    cancel = threading.Event()
    session = start_session(session_jobs.echo, "", cancel=cancel)
    threading.Timer(0.5, cancel.set).start()
    with pytest.raises(SessionEnded) as ended:
        session.ask("hang")
    assert ended.value.outcome.status is JobStatus.CANCELLED


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ")[1][:1] != "Z"
    except OSError:
        return False
