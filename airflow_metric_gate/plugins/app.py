"""The "Metric gate" FastAPI app the api-server mounts under the plugin's URL prefix.

Routes (all relative to the prefix, all behind Airflow's authentication and DAG authorisation):

* ``GET /`` the series the user may read (the navigation entry);
* ``GET /series`` the runs of one series identity, and the history chart of a chosen coordinate;
* ``GET /task`` the verdict of an ``EvaluateGateOperator`` task instance, with its charts;
* ``POST /mark`` mark a run trusted or untrusted (edit permission on its DAG, a reason, a form token);
* ``POST /accept`` accept a series' new level from a reported level shift's first night, through
  :func:`~airflow_metric_gate.accept.accept_level` (edit permission, a reason, a form token).

Each handler loads its input with a marshmallow schema, reads a bounded amount through the store's
indexes, and renders HTML with :mod:`airflow_metric_gate.plugins.pages`.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

from fastapi import FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, RedirectResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from airflow_metric_gate.accept import accept_level, accept_offer
from airflow_metric_gate.evaluation import DEFAULT_HISTORY_LIMIT, FAIL
from airflow_metric_gate.plugins import auth
from airflow_metric_gate.plugins.charts import coordinate_chart, night_chart, steps_chart
from airflow_metric_gate.plugins.data import (
    history_points,
    night_points,
    overview_grid,
    regressed_declaration,
    step_band,
    steps_label,
    verdict_summary,
    worst_failures,
    worst_step,
)
from airflow_metric_gate.plugins.forms import MarkForm, accept_form, mark_form, mark_target
from airflow_metric_gate.plugins.layout import message_page, series_link
from airflow_metric_gate.plugins.metadata import EVALUATE_OPERATOR, open_ui_store, task_verdict
from airflow_metric_gate.plugins.pages import (
    DeclarationView,
    Picker,
    index_page,
    overview_table,
    series_page,
    task_page,
)
from airflow_metric_gate.plugins.web import MAX_FORM_BYTES as MAX_FORM_BYTES  # the limit, named where it holds
from airflow_metric_gate.plugins.web import SECURITY_HEADERS as SECURITY_HEADERS
from airflow_metric_gate.plugins.web import _form_body_schema, _html, _load, _parameters, posted_form
from airflow_metric_gate.schemas.ui import (
    AcceptFormSchema,
    MarkFormSchema,
    SeriesQuerySchema,
    TaskQuerySchema,
)
from airflow_metric_gate.store import MetricStore, RunRow, StoreError, StoreInputError, StoreUnavailable
from airflow_metric_gate.verdict import VERDICT_SCHEMA

#: At most this many failing coordinates of one declaration get a history chart on the task page.
CHARTS_PER_DECLARATION = 6
#: Runs per page of the series page.
RUNS_PER_PAGE = 50
#: Steps offered by the series page's step picker.
MAX_PICKER_STEPS = 5_000

def create_app() -> FastAPI:
    """Return the plugin's FastAPI app (mounted by the api-server; no Airflow import at build time)."""
    app = FastAPI(title="Metric gate", docs_url=None, redoc_url=None, openapi_url=None)

    @app.middleware("http")
    async def _security_headers(request: Request, call_next: Any) -> Any:
        response = await call_next(request)
        for name, value in SECURITY_HEADERS.items():
            response.headers.setdefault(name, value)
        return response

    @app.exception_handler(HTTPException)
    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> HTMLResponse:
        title = {400: "Invalid request", 401: "Not authenticated", 403: "Forbidden", 404: "Not found",
                 405: "Method not allowed", 413: "Request too large"}.get(exc.status_code, "Error")
        response = _html(message_page(title, str(exc.detail)), exc.status_code)
        for name, value in (exc.headers or {}).items():
            response.headers.setdefault(name, value)
        return response

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> HTMLResponse:
        return _html(message_page("Invalid request", "invalid input"), 400)

    @app.exception_handler(StoreError)
    async def _store_error(request: Request, exc: StoreError) -> HTMLResponse:
        code = 503 if isinstance(exc, StoreUnavailable) else 500
        return _html(message_page("Metric store error", str(exc)), code)

    @app.get("/", response_class=HTMLResponse)
    def index(user: auth.User) -> HTMLResponse:
        with open_ui_store() as store:
            identities = store.series_identities()
        allowed, unowned = auth.readable(user, {i["dag_id"] for i in identities})
        shown = [i for i in identities if (i["dag_id"] in allowed if i["dag_id"] else unowned)]
        hidden = len({(i["series"], i["backend"], i["suite"]) for i in identities}) - len(
            {(i["series"], i["backend"], i["suite"]) for i in shown}
        )
        return _html(index_page(shown, hidden=hidden))

    @app.get("/series", response_class=HTMLResponse, openapi_extra={"parameters": _parameters(SeriesQuerySchema())})
    def series(request: Request, user: auth.User) -> HTMLResponse:
        q = _load(SeriesQuerySchema(), request.query_params)
        identity = (q["series"], q["backend"], q["suite"])
        with open_ui_store() as store:
            writers = store.series_dag_ids(*identity)
            allowed, unowned = auth.readable(user, writers) if writers else (set(), False)
            if not allowed and not unowned:  # unknown and unreadable answer alike: no existence oracle
                raise HTTPException(404, f"no runs of series {q['series']} ({q['backend']}, {q['suite']}) "
                                         "that you may read")
            scope: dict[str, Any] = {"dag_ids": allowed, "include_unowned": unowned}
            runs = store.series_runs(
                *identity, limit=RUNS_PER_PAGE + 1, offset=(q["page"] - 1) * RUNS_PER_PAGE, declarations=False,
                **scope,
            )
            has_next = len(runs) > RUNS_PER_PAGE
            runs = runs[:RUNS_PER_PAGE]
            newest = next(iter(store.series_runs(*identity, limit=1, **scope)), None)  # its declarations: the picker
            picker = Picker(declarations=list(newest.declarations) if newest else [], nights=q["nights"])
            chart = ""
            chosen = (q["metric_key"], q["steps_key"], q["constraint_key"])
            night = newest  # the night whose steps the picker offers
            default_step = None
            if q["metric_key"] is None and picker.declarations:
                # open on what needs attention: the newest night's regressed declaration, at its worst step
                found = regressed_declaration(runs if q["page"] == 1 else [], picker.declarations)
                first = found[1] if found else picker.declarations[0]
                chosen = (first["metric_key"], first["steps_key"], first["constraint_key"])
                if found:
                    night = found[0]
                    values = {v.step: v.value for v in store.declaration_values(night.run_id, *chosen)}
                    gate = next((d for d in night.declarations if
                                 (d["metric_key"], d["steps_key"], d["constraint_key"]) == chosen), None) \
                        if night.declarations else None
                    if gate is None:
                        full = store.get_run(night.run_id)
                        gate = next((d for d in (full.declarations if full else []) if
                                     (d["metric_key"], d["steps_key"], d["constraint_key"]) == chosen), None)
                    if gate is not None and "constraint" in gate:
                        bands = step_band(values, store.declaration_baselines(night.run_id, *chosen,
                                                                              DEFAULT_HISTORY_LIMIT), gate)
                        default_step = worst_step(values, bands)
            if night is not None and chosen[0] is not None:
                picker.metric_key, picker.steps_key, picker.constraint_key = chosen
                steps = [v.step for v in store.declaration_values(night.run_id, *chosen, limit=MAX_PICKER_STEPS)]
                picker.steps = steps
                if q["step"] in steps:
                    picker.step = q["step"]
                else:
                    picker.step = default_step if default_step in steps else (steps[0] if steps else None)
                if picker.step is not None:
                    rows = store.coordinate_history(
                        *identity, metric_key=chosen[0], steps_key=chosen[1], constraint_key=chosen[2],
                        step=picker.step, limit=q["nights"], **scope,
                    )
                    chart = coordinate_chart(history_points(rows), None, label=f"{chosen[0]} step {picker.step}")
        editable = {d for d in {r.provenance.get("dag_id") for r in runs} if auth.is_authorized(user, d, "PUT")}
        next_url = "series?" + request.url.query
        forms = {
            r.run_id: MarkForm(auth.form_token(user, r, mark_target(r)), next_url)
            for r in runs
            if r.provenance.get("dag_id") in editable
        }
        nights = ""
        if chosen[0] is not None:
            measure, points = night_points(runs[:q["nights"]], chosen)
            nights = night_chart(points, measure, label=f"{chosen[0]} over the nights")
        overview = overview_table(identity, overview_grid(runs, picker.declarations), picker.declarations,
                                  q["nights"])
        page_html = series_page(
            identity, runs, page_number=q["page"], has_next=has_next, picker=picker, chart=chart, mark_forms=forms,
            overview=overview, nights_chart=nights,
        )
        return _html(page_html)

    @app.get("/task", response_class=HTMLResponse, openapi_extra={"parameters": _parameters(TaskQuerySchema())})
    def task(request: Request, user: auth.User) -> HTMLResponse:
        q = _load(TaskQuerySchema(), request.query_params)
        auth.require(user, q["dag_id"], "GET")
        found = task_verdict(q["dag_id"], q["run_id"], q["task_id"], q["map_index"])
        if found is None:
            raise HTTPException(404, f"no task instance {q['task_id']} in run {q['run_id']} of DAG {q['dag_id']}")
        verdict = found.verdict
        if not (isinstance(verdict, Mapping) and str(verdict.get("schema", "")).startswith(VERDICT_SCHEMA[:-3])):
            if found.operator != EVALUATE_OPERATOR:
                return _html(message_page(
                    "Not a metric gate evaluation",
                    f"Task {q['task_id']} is a {found.operator or 'task'}; the Metric gate tab shows the verdict "
                    f"of {EVALUATE_OPERATOR} tasks.",
                ))
            return _html(message_page(
                "No verdict yet", f"Task {q['task_id']} (state {found.state or 'none'}) has pushed no verdict yet."
            ))
        summary, from_verdict = verdict_summary(verdict)
        results = verdict.get("results", [])
        views = []
        mark = ""
        series_href = None
        with open_ui_store() as store:
            run = store.get_run(verdict["run_id"])
            if run is not None:
                allowed, unowned = auth.readable(user, store.series_dag_ids(run.series, run.backend, run.suite))
                scope: dict[str, Any] = {"dag_ids": allowed | {q["dag_id"]}, "include_unowned": unowned}
                series_href = series_link(run.series, run.backend, run.suite)
                gates = {(d["metric_key"], d["steps_key"], d["constraint_key"]): d for d in run.declarations}
            calibrated_keys = {(d.get("metric_key"), d.get("steps_key"), d.get("constraint_key"))
                               for d in verdict.get("declarations") or () if isinstance(d, Mapping)}
            for entry in summary:
                view = DeclarationView(entry=entry, series_href=series_href)
                views.append(view)
                if run is None or not entry["counts"].get(FAIL):
                    continue
                key = (entry["metric_key"], entry["steps_key"], entry["constraint_key"])
                # a step's chart per failing step (the calibrated night's own result has no step)
                fails = [r for r in worst_failures(results, entry, CHARTS_PER_DECLARATION) if r["step"] is not None]
                view.more = max(int(entry["counts"][FAIL]) - len(fails), 0)
                for r in fails:
                    rows = store.coordinate_history(
                        run.series, run.backend, run.suite, metric_key=key[0], steps_key=key[1],
                        constraint_key=key[2], step=r["step"], until=run.logical_date, limit=q["nights"], **scope,
                    )
                    band = (r["ref"], r["lo"], r["hi"]) if r.get("ref") is not None else None
                    label = f"{key[0]} step {r['step']} over nights"
                    view.charts.append((r, coordinate_chart(history_points(rows, run.run_id), band, label=label)))
                if steps_label(key[1]) == "all" and key in gates:
                    values = store.declaration_values(run.run_id, *key)
                    calibrated = key in calibrated_keys
                    # the calibrated policy judged its steps with its own step bands: draw only those the
                    # verdict lists, never the reference band it did not use
                    bands = {} if calibrated else step_band(
                        {v.step: v.value for v in values},
                        store.declaration_baselines(run.run_id, *key, DEFAULT_HISTORY_LIMIT), gates[key],
                    )
                    failing = set()
                    for r in results:
                        if r["step"] is None or (r["metric_key"], r["steps_key"], r["constraint_key"]) != key:
                            continue
                        if r["status"] == FAIL:
                            failing.add(r["step"])
                        if r["status"] == FAIL or (calibrated and r.get("lo") is not None):
                            bands[r["step"]] = (r["ref"], r["lo"], r["hi"])
                    view.steps_chart = steps_chart(
                        [(v.step, v.value) for v in values], bands, failing, label=f"{key[0]} over training steps",
                        band_kind="calibrated" if calibrated else "reference",
                    )
                    view.steps_note = (
                        "Calibrated policy: the band drawn is each listed step's own band as the verdict judged it "
                        "(its median over the declaration's trusted nights, widened to the night's threshold); "
                        "the night is decided as a whole, so a step the verdict does not list (it passed, and the "
                        "verdict lists failures only) has no band here." if calibrated else
                        "The band of a failing step is the one the verdict used; other steps show the band the "
                        f"declaration judges them with over the {DEFAULT_HISTORY_LIMIT} latest trusted baseline runs."
                    )
            accept = ""
            if run is not None and auth.is_authorized(user, run.provenance.get("dag_id") or q["dag_id"], "PUT"):
                token = auth.form_token(user, run, mark_target(run))
                mark = mark_form(run, MarkForm(token, "task?" + request.url.query))
                offer = accept_offer(verdict)
                if offer is not None:
                    since, shown = offer
                    accept = accept_form(run, since, MarkForm(auth.form_token(user, run, _accept_action(since)),
                                                             "task?" + request.url.query), shown)
        return _html(task_page(verdict, views, summary_from_verdict=from_verdict, series_href=series_href, mark=mark,
                               accept=accept))

    @app.post("/mark", openapi_extra=_form_body_schema(MarkFormSchema()))
    async def mark(request: Request, user: auth.User) -> RedirectResponse:
        form = await posted_form(request, MarkFormSchema())
        with open_ui_store() as store:
            run = _editable_run(store, user, form["run_id"])
            auth.check_form_token(user, run, form["status"], form["token"])
            store.mark_run(
                run.run_id, form["status"], reason=form["reason"], marked_by=auth.user_name(user),
                at=datetime.now(timezone.utc),
            )
        return RedirectResponse(form["next"], status_code=303)

    @app.post("/accept", openapi_extra=_form_body_schema(AcceptFormSchema()))
    async def accept(request: Request, user: auth.User) -> RedirectResponse:
        form = await posted_form(request, AcceptFormSchema())
        with open_ui_store() as store:
            run = _editable_run(store, user, form["run_id"])
            auth.check_form_token(user, run, _accept_action(form["since"]), form["token"])
            try:
                accept_level(store, run.series, run.backend, run.suite, since=form["since"], reason=form["reason"],
                             by=auth.user_name(user))
            except StoreInputError as err:  # no such night of this series: nothing changed
                raise HTTPException(400, str(err)) from None
        return RedirectResponse(form["next"], status_code=303)

    return app


def _accept_action(since: str) -> str:
    """The action an accept form's token is bound to: accepting from this very night (the form cannot be edited)."""
    return f"accept:{since}"


def _editable_run(store: MetricStore, user: Any, run_id: str) -> RunRow:
    """The store run a form names, if the user may edit its DAG (an unknown run and an unreadable one: both 404).

    :param store: the open store.
    :param user: the signed-in user.
    :param run_id: the store run id the form names.
    """
    run = store.get_run(run_id)
    dag_id = run.provenance.get("dag_id") if run is not None else None
    if run is None or not auth.is_authorized(user, dag_id, "GET"):
        raise HTTPException(404, f"no store run {run_id} that you may read")
    auth.require(user, dag_id, "PUT")
    return run
