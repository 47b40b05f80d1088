"""The backups view's FastAPI app, mounted on Airflow's api-server by :mod:`airflow_rbak.ui.plugin`.

Authentication and authorisation are Airflow's: every route needs a user whom the auth manager lets
read the runs of ``rbak_backup`` (the JWT of Airflow's UI cookie, or a bearer token); Restore… and
Verify appear only for users it lets trigger ``rbak_restore`` and ``rbak_verify``. Verify posts to
Airflow's own REST API, so triggering is checked (and audited) by Airflow itself. Storage is only read. A queue's
messages show their bodies only to users who may trigger ``rbak_restore`` (:func:`may_see_bodies`), on the page and
the API alike.
A page opened without a login goes to Airflow's login page (the API answers 401); a page the user may
not see says so inside the view's frame.
"""

from __future__ import annotations

import functools
from concurrent.futures import ThreadPoolExecutor
from typing import Annotated, Any

from airflow.api_fastapi.app import get_auth_manager
from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity, DagDetails
from airflow.api_fastapi.core_api.security import GetUserDep, requires_access_dag
from airflow.models.dag import DagModel
from airflow.models.serialized_dag import SerializedDagModel
from airflow.utils.session import create_session
from fastapi import Depends, FastAPI, HTTPException, Query, Request
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from pydantic import BaseModel, Field
from sqlalchemy import select
from starlette.exceptions import HTTPException as StarletteHTTPException

from airflow_rbak.airflow_settings import rbak_settings
from airflow_rbak.exceptions import RbakError
from airflow_rbak.hooks.encryption import connection_keyring
from airflow_rbak.hooks.storage import open_connected_storage
from airflow_rbak.repository.manifest_store import ManifestNotFoundError
from airflow_rbak.repository.message_filter import FilterError
from airflow_rbak.ui import URL_PREFIX
from airflow_rbak.ui.airflow_runs import load_backup_runs, with_reasons
from airflow_rbak.ui.backup_catalog import (
    ACTIONABLE,
    UI_RETRIES,
    BackupCatalog,
    LocationNotFoundError,
    backup_row,
    describe_error,
)
from airflow_rbak.ui.message_browser import BODY_FILTERS, MessagePageError, Position, filter_of, queue_of
from airflow_rbak.ui.message_browser import message_page as read_messages
from airflow_rbak.ui.message_requests import BODIES_REFUSED, FilterRefused, back_pages, filter_query, refused_page
from airflow_rbak.ui.messages_page import messages_page
from airflow_rbak.ui.pages import Links, detail_page, list_page, message_page, restore_page
from airflow_rbak.ui.param_errors import plain_param_error
from airflow_rbak.ui.runs import BACKUP_DAG_ID, RESTORE_DAG_ID, VERIFY_DAG_ID, RunIndex

# FastAPI's own /openapi.json would answer anyone: the one below asks for the same login as every other route.
app = FastAPI(title="RabbitMQ backups (airflow-rbak)", docs_url=None, redoc_url=None, openapi_url=None)
#: Reading the backups' list means reading rbak_backup's runs (the view shows them beside each backup).
_can_read = [Depends(requires_access_dag("GET", DagAccessEntity.RUN, param_dag_id=BACKUP_DAG_ID))]
Offset = Annotated[int, Query(ge=0)]
Limit = Annotated[int, Query(ge=1, le=500)]


@functools.cache
def catalog() -> BackupCatalog:
    """The configured locations (read once per api-server process: ``[rbak] storage_url`` and ``ui_locations``),
    opened with ``[rbak] encryption_conn_id``'s keys when it is set."""
    settings = rbak_settings()
    conn_id = settings.storage_conn_id()  # the DAGs' storage credentials ([rbak] storage_conn_id), read as they read them
    keyring = connection_keyring(settings.encryption_conn_id())
    return BackupCatalog(settings.ui_storage_urls(),
                         opener=lambda url: open_connected_storage(url, conn_id, retries=UI_RETRIES, keyring=keyring))


def run_index(backup: tuple[str, str] | None = None) -> RunIndex:
    """Every run of the view's DAGs; for ``backup`` (location URL, backup id), its failed runs with their reasons."""
    with create_session() as session:
        runs = load_backup_runs(session)
        if backup is None:
            return RunIndex(runs)
        mine = [r for r in runs if (r.storage_url, r.backup_id) == backup]
        return RunIndex([*(r for r in runs if (r.storage_url, r.backup_id) != backup), *with_reasons(session, mine)])


def permissions(user: Any) -> dict[str, bool]:
    """Which buttons the user gets: each is the auth manager's answer to "may this user trigger that DAG"."""
    def may_trigger(dag_id: str) -> bool:
        details = DagDetails(id=dag_id, team_name=DagModel.get_team_name(dag_id))
        return get_auth_manager().is_authorized_dag(method="POST", access_entity=DagAccessEntity.RUN,
                                                    details=details, user=user)
    return {"restore": may_trigger(RESTORE_DAG_ID), "verify": may_trigger(VERIFY_DAG_ID)}


def may_see_bodies(user: Any) -> bool:
    """Whether the user may read message bodies: the right to trigger ``rbak_restore`` (docs/security.md says why)."""
    return permissions(user)["restore"]


def paused() -> dict[str, bool]:
    """Which of the DAGs the view triggers are paused (a run triggered then stays queued until it is unpaused)."""
    with create_session() as session:
        rows = session.execute(select(DagModel.dag_id, DagModel.is_paused).where(
            DagModel.dag_id.in_((RESTORE_DAG_ID, VERIFY_DAG_ID))))
        return {dag_id: bool(is_paused) for dag_id, is_paused in rows}


def _wants_html(request: Request) -> bool:
    return "text/html" in request.headers.get("accept", "")


def plain_validation(exc: RequestValidationError) -> str:
    """FastAPI's refusal of a query parameter in one sentence per parameter: ``offset: must be 0 or more (got -1)``."""
    said = []
    for error in exc.errors():
        where = ".".join(str(p) for p in error.get("loc", ())[1:]) or "request"
        limit = (error.get("ctx") or {})
        rule = {"greater_than_equal": f"must be {limit.get('ge')} or more", "less_than_equal":
                f"must be {limit.get('le')} or less", "int_parsing": "must be a whole number",
                "bool_parsing": "must be true or false"}.get(error.get("type", ""), str(error.get("msg", "is not valid")))
        said.append(f"{where}: {rule} (got {str(error.get('input'))[:40]!r})")
    return "; ".join(said)


@app.exception_handler(RequestValidationError)
async def _bad_query(request: Request, exc: RequestValidationError) -> Response:
    """A bad query parameter: a page that says which and why, or JSON ``{"detail": "<the same sentence>"}``."""
    detail = plain_validation(exc)
    if _wants_html(request):
        page = message_page("Not a valid address", f"This page cannot be shown as asked: {detail}.", links(request))
        return HTMLResponse(page, status_code=400)
    return JSONResponse({"detail": detail}, status_code=400)


@app.exception_handler(StarletteHTTPException)
async def _refusal(request: Request, exc: StarletteHTTPException) -> Response:
    """A browser (it asks for HTML) without a login goes to Airflow's login page, and one whose user may not see the
    page is told so in the view's frame; API clients keep Airflow's JSON answers."""
    if not _wants_html(request) or exc.status_code not in (401, 403):
        return await http_exception_handler(request, exc)
    if exc.status_code == 401:
        login = get_auth_manager().get_url_login(next_url=str(request.url))
        return RedirectResponse(f"{links(request).airflow_root}{login}" if login.startswith("/") else login, 303)
    page = message_page("Not allowed", f"Airflow does not let you see this page ({exc.detail}). Ask an administrator "
                        "for read access to the rbak_backup DAG and its runs.", links(request))
    return HTMLResponse(page, status_code=403)


def links(request: Request) -> Links:
    """Links relative to where Airflow serves us (``root_path`` is Airflow's base path plus our mount)."""
    root = request.scope.get("root_path", "").rstrip("/")
    airflow_root = root[: -len(URL_PREFIX)] if root.endswith(URL_PREFIX) else ""
    return Links(airflow_root=airflow_root, view_root=root)


def _location(location_id: str) -> Any:
    try:
        return catalog().location(location_id)
    except LocationNotFoundError as exc:
        raise HTTPException(404, str(exc)) from None


def _detail(location_id: str, backup_id: str) -> dict[str, Any]:
    try:
        location = _location(location_id)
        return catalog().detail(location, backup_id, run_index((location.url, backup_id)))
    except (LocationNotFoundError, ManifestNotFoundError) as exc:
        raise HTTPException(404, str(exc)) from None
    except HTTPException:
        raise
    except Exception as exc:  # noqa: BLE001 - a damaged manifest, an unreachable location: said in one line
        raise HTTPException(502, f"{backup_id}: {describe_error(exc)}") from None


def _pages(loc: str | None, offset: int, limit: int, refresh: bool) -> list[dict[str, Any]]:
    runs = run_index()
    cat = catalog()
    with ThreadPoolExecutor(max_workers=max(1, len(cat.locations))) as pool:  # a slow location delays none of the others' reads
        pages = pool.map(lambda where: cat.page(where, runs, offset if where.id == loc else 0, limit, refresh), cat.locations)
        return list(pages)


@app.get("/openapi.json", dependencies=_can_read, include_in_schema=False)
def openapi() -> dict[str, Any]:
    """The view's OpenAPI document, for users who may read the view."""
    return app.openapi()


@app.get("/api/locations", dependencies=_can_read)
def api_locations() -> list[dict[str, str | None]]:
    """The configured locations: the default storage URL first."""
    return [loc.to_json() for loc in catalog().locations]


@app.get("/api/locations/{location_id}/backups", dependencies=_can_read)
def api_backups(location_id: str, offset: Offset = 0, limit: Limit = 50, refresh: bool = False) -> dict[str, Any]:
    """One page of a location's backups, newest first; ``error`` says why a location cannot be read."""
    return catalog().page(_location(location_id), run_index(), offset, limit, refresh)


class ParamRefusal(BaseModel):
    """Airflow's answer to a trigger whose params failed their schemas (its ``detail``)."""

    detail: str = Field(max_length=20_000)


@app.post("/api/param-error", dependencies=_can_read)
def api_param_error(refusal: ParamRefusal) -> dict[str, str | None]:
    """Airflow's refusal of a trigger's param in one sentence, and the field it concerns (the restore form's errors)."""
    return plain_param_error(refusal.detail)


@app.get("/api/locations/{location_id}/backups/{backup_id}", dependencies=_can_read)
def api_backup(location_id: str, backup_id: str, user: GetUserDep) -> dict[str, Any]:
    """One backup: the list's fields, its queues and segments, definitions counts, its DAG runs, ``can`` (which DAGs
    the user may trigger) and ``paused`` (which of them are paused)."""
    return {**_detail(location_id, backup_id), "can": permissions(user), "paused": paused()}


@app.get("/", response_class=HTMLResponse, dependencies=_can_read)
def list_view(request: Request, loc: str | None = None, offset: Offset = 0, limit: Limit = 50,
              refresh: bool = False) -> str:
    return list_page(_pages(loc, offset, limit, refresh), links(request))


@app.get("/backups/{location_id}/{backup_id}", response_class=HTMLResponse, dependencies=_can_read)
def backup_view(request: Request, location_id: str, backup_id: str, user: GetUserDep) -> HTMLResponse:
    try:
        detail = _detail(location_id, backup_id)
    except HTTPException as exc:
        return HTMLResponse(message_page(f"Backup {backup_id}", str(exc.detail), links(request)),
                            status_code=exc.status_code)
    return HTMLResponse(detail_page(detail, links(request), permissions(user), paused()))


def dag_params(dag_id: str) -> dict[str, dict[str, Any]]:
    """A DAG's params as Airflow's REST API gives them (value, schema, description), from the serialised DAG."""
    with create_session() as session:
        dag = SerializedDagModel.get_dag(dag_id, session=session)
    if dag is None:
        raise HTTPException(404, dag_missing(dag_id))
    found = {}
    for name, param in dag.params.items():
        try:
            found[name] = param.dump()
        except (ValueError, TypeError):  # a required param without a default has no value to show
            found[name] = {"value": None, "schema": param.schema, "description": param.description}
    return found


def _restorable(location: Any, backup_id: str) -> None:
    """Refuse the form for a backup the location does not hold (404) or one the view does not restore (409)."""
    try:
        summary = catalog().summary(location, backup_id)
    except LocationNotFoundError:
        raise HTTPException(404, f"There is no backup {backup_id!r} in {location.url}; nothing to restore.") from None
    except Exception as exc:  # noqa: BLE001 - an unreadable location: said in one line
        raise HTTPException(502, f"{location.url}: {describe_error(exc)}") from None
    row = backup_row(summary, location, run_index((location.url, backup_id)),
                     catalog().damage.found(location.url, backup_id))
    if row["status"] not in ACTIONABLE:
        raise HTTPException(409, f"Backup {backup_id} is {row['status']}: {row['problem'] or 'not restorable'}. "
                                 "The view restores complete (and rebuilt) backups only.")


def dag_missing(dag_id: str) -> str:
    """Why a DAG's form cannot be shown: Airflow has not serialised the DAG (its file is not parsed yet)."""
    return (f"{dag_id} is not in Airflow's database yet: the form is built from the DAG as Airflow serialised it. "
            f"Put airflow-rbak's dags/ in the DAGs folder and let the dag-processor parse it (`airflow dags "
            f"reserialize` does it at once), then open this page again.")


@app.get("/restore/{location_id}/{backup_id}", response_class=HTMLResponse, dependencies=_can_read)
def restore_view(request: Request, location_id: str, backup_id: str, user: GetUserDep) -> HTMLResponse:
    """rbak_restore's trigger form with the backup's location and id filled in (only for users who may trigger it)."""
    title, to = f"Restore {backup_id}", links(request)
    back = (to.backup(location_id, backup_id), f"backup {backup_id}")
    if not permissions(user)["restore"]:
        return HTMLResponse(message_page(title, f"You may not trigger {RESTORE_DAG_ID}: Airflow's permissions let you "
                                         "read backups, not restore them.", to, back), status_code=403)
    try:
        location = _location(location_id)
        _restorable(location, backup_id)
        params = dag_params(RESTORE_DAG_ID)
    except HTTPException as exc:
        if exc.status_code == 404 and "no backup" in str(exc.detail):
            back = (to.listing(location_id, 0), "all backups")
        return HTMLResponse(message_page(title, str(exc.detail), to, back), status_code=exc.status_code)
    return HTMLResponse(restore_page(location.to_json(), backup_id, params, to, paused().get(RESTORE_DAG_ID, False)))


def _messages(location_id: str, backup_id: str, request: Request, user: Any, queue: int, at: str | None,
              limit: int) -> dict[str, Any]:
    """One page of a queue's messages, or an HTTPException that says why not (bodies only for those who may)."""
    show_bodies = may_see_bodies(user)
    query = filter_query(request)
    asked = [name for name, _ in query if name in BODY_FILTERS]
    if not show_bodies and asked:
        raise HTTPException(403, f"{', '.join(asked)}: a body filter reads the bodies, which you may not see. "
                                 f"{BODIES_REFUSED}")
    location = _location(location_id)
    try:
        message_filter = filter_of(query)
        start = Position.parse(at)
        manifest = catalog().manifest(location, backup_id)
    except ManifestNotFoundError as exc:
        raise HTTPException(404, str(exc)) from None
    except (MessagePageError, RbakError, ValueError) as exc:
        raise FilterRefused(exc) from None
    try:
        page = read_messages(catalog().storage(location), manifest, queue, start=start, limit=limit,
                             message_filter=message_filter,
                             show_bodies=show_bodies)
    except (MessagePageError, FilterError) as exc:  # a body regex that ran out of time says so
        raise FilterRefused(exc) from None
    except Exception as exc:  # noqa: BLE001 - a damaged segment, an unreachable location: said in one line
        raise HTTPException(502, f"{backup_id}: {describe_error(exc)}") from None
    for found in page["damaged"]:  # the backup's page says so too, and offers no Restore… (damage.py)
        catalog().damage.record(location.url, backup_id, found["segment"], found["reason"])
    return {**page, "backup_id": backup_id, "location": location.to_json(), "filters": query,
            "bodies_refused": None if show_bodies else BODIES_REFUSED}


def _refused_page(location_id: str, backup_id: str, request: Request, user: Any, queue: int, limit: int,
                  refused: FilterRefused) -> dict[str, Any] | None:
    """The messages page as asked, with no messages and the refusal beside its field (None: the queue cannot be read)."""
    try:
        location = _location(location_id)
        q = queue_of(catalog().manifest(location, backup_id), queue)
    except Exception:  # noqa: BLE001 - the plain refusal page says why then
        return None
    return refused_page(q, queue, request, limit, backup_id, location.to_json(), may_see_bodies(user), refused)


QueueIndex = Annotated[int, Query(ge=0)]
PageLimit = Annotated[int, Query(ge=1, le=100)]


@app.get("/api/locations/{location_id}/backups/{backup_id}/messages", dependencies=_can_read)
def api_messages(request: Request, location_id: str, backup_id: str, user: GetUserDep, queue: QueueIndex = 0,
                 at: str | None = None, limit: PageLimit = 20) -> dict[str, Any]:
    """One page of a queue's messages (``queue``: its place in the manifest), from position ``at``, through the
    filters given as the other query parameters; ``body`` is null and ``bodies_refused`` says why for a user who may
    not see bodies, and a body filter from such a user is refused (403)."""
    return _messages(location_id, backup_id, request, user, queue, at, limit)


@app.get("/backups/{location_id}/{backup_id}/messages", response_class=HTMLResponse, dependencies=_can_read)
def messages_view(request: Request, location_id: str, backup_id: str, user: GetUserDep, queue: QueueIndex = 0,
                  at: str | None = None, limit: PageLimit = 20) -> HTMLResponse:
    """A queue's messages page by page, with the filter form (a filter it cannot use is said beside its field, the
    form kept as given, with status 400)."""
    to = links(request)
    back = (to.backup(location_id, backup_id), f"backup {backup_id}")
    try:
        page = {**_messages(location_id, backup_id, request, user, queue, at, limit),
                "back": back_pages(request.query_params.get("back"))}
    except FilterRefused as exc:
        kept = _refused_page(location_id, backup_id, request, user, queue, limit, exc)
        if kept is not None:
            return HTMLResponse(messages_page(kept, to), status_code=400)
        return HTMLResponse(message_page(f"Messages of {backup_id}", str(exc.detail), to, back), status_code=400)
    except HTTPException as exc:
        return HTMLResponse(message_page(f"Messages of {backup_id}", str(exc.detail), to, back),
                            status_code=exc.status_code)
    return HTMLResponse(messages_page(page, to))
