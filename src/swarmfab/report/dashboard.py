"""A local web dashboard over the store (FastAPI): the runs, and each run's report, live.

Pages are the HTML report's sections rendered on request; a small script polls a JSON
state endpoint every few seconds and fetches the run's body again when the state token
changes (a new verdict, event, case, champion or status). It only reads the store, so it
can watch a run that another process is writing (SQLite WAL: readers never block it).

    GET /                     runs list          GET /rows                the list's rows
    GET /runs/{run}           one run            GET /runs/{run}/body     its sections
    GET /runs/{run}/state     JSON state token   GET /api/runs            runs as JSON

``{run}`` is a run id or ``latest`` (which follows the newest run as runs start).
"""

from __future__ import annotations

from typing import Any

from swarmfab.errors import MissingExtraError, StoreError, import_extra

try:  # the report extra
    from fastapi import FastAPI, Request
    from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response
except ImportError as exc:
    raise MissingExtraError(exc.name or "fastapi", "report", "the dashboard") from exc
from swarmfab.knowledge import Store
from swarmfab.report.html import render_run_body, templates
from swarmfab.report.run_view import load_run_view

__all__ = ["create_app", "run_state", "serve"]

POLL_MS = 2000


def run_state(store: Store, run_ref: str) -> dict[str, Any]:
    """What a run page needs to know whether to redraw: counts and a token over them."""
    run = store.run(run_ref)
    verdicts = sum(store.status_counts(run.id).values())
    events = len(store.events(run.id))
    cases = len(store.case_history(run.workload))
    token = f"{run.id}|{run.status}|{verdicts}|{events}|{cases}|{run.champion_id}"
    return {"run": run.id, "status": run.status, "verdicts": verdicts, "events": events,
            "cases": cases, "champion": run.champion_id, "token": token}


def _runs(store: Store) -> list[dict[str, Any]]:
    return [{"id": r.id, "workload": r.workload, "status": r.status,
             "started": r.started_at.strftime("%Y-%m-%d %H:%M:%S"), "champion": r.champion_id,
             "verdicts": sum(store.status_counts(r.id).values())}
            for r in reversed(store.runs())]


def create_app(store: Store, poll_ms: int = POLL_MS) -> FastAPI:
    """The dashboard over ``store``; every request reads the store afresh."""
    app = FastAPI(title="swarmfab dashboard", docs_url=None, redoc_url=None)
    pages = templates()
    label = store.url

    @app.exception_handler(StoreError)
    def _missing(request: Request, exc: StoreError) -> Response:
        if request.url.path.endswith("/state") or request.url.path.startswith("/api/"):
            return JSONResponse({"error": str(exc)}, status_code=404)
        return PlainTextResponse(f"{exc}\n", status_code=404)

    @app.get("/", response_class=HTMLResponse)
    def runs_page() -> str:
        return pages.get_template("dashboard_runs.html.j2").render(
            runs=_runs(store), store=label, poll_ms=poll_ms)

    @app.get("/rows", response_class=HTMLResponse)
    def runs_rows() -> str:
        return pages.get_template("dashboard_rows.html.j2").render(runs=_runs(store))

    @app.get("/api/runs")
    def runs_json() -> list[dict[str, Any]]:
        return _runs(store)

    @app.get("/runs/{run_ref}", response_class=HTMLResponse)
    def run_page(run_ref: str) -> str:
        state = run_state(store, run_ref)
        body = render_run_body(load_run_view(store, state["run"]))
        return pages.get_template("dashboard_run.html.j2").render(
            run_ref=run_ref, body=body, token=state["token"], store=label, poll_ms=poll_ms)

    @app.get("/runs/{run_ref}/body", response_class=HTMLResponse)
    def run_body(run_ref: str) -> HTMLResponse:
        state = run_state(store, run_ref)
        body = render_run_body(load_run_view(store, state["run"]))
        return HTMLResponse(body, headers={"X-Run-State": state["token"],
                                           "Cache-Control": "no-store"})

    @app.get("/runs/{run_ref}/state")
    def state(run_ref: str) -> dict[str, Any]:
        return run_state(store, run_ref)

    return app


def serve(store: Store, host: str = "127.0.0.1", port: int = 8765) -> None:
    """Serve the dashboard until interrupted."""
    uvicorn = import_extra("uvicorn", "report", "the dashboard")

    uvicorn.run(create_app(store), host=host, port=port, log_level="warning")
