"""Who may see and mark what in the "Metric gate" UI, asked of Airflow's own auth manager.

A plugin's FastAPI app is not protected by Airflow on its own: every route depends on
:func:`current_user` (the api-server's ``get_user``: a ``Authorization: Bearer`` JWT, or the
``_token`` cookie the Airflow UI sets at login) and then asks the configured auth manager:

* reading a series or a verdict needs ``GET`` on the DAG that wrote it (``runs.dag_id``); runs
  written outside Airflow (no DAG) need ``GET`` on DAGs in general;
* marking a run trusted or untrusted needs ``PUT`` (edit) on that DAG.

Forms that change something carry a token (an HMAC with the api-server's ``[api] secret_key``)
bound to the user, the run as it is, and the action, that expires after an hour and is used once,
so another site cannot post them with the user's cookie and a posted form cannot be replayed.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
import time
from collections.abc import Iterable
from typing import Annotated, Any, Literal

from fastapi import Depends, HTTPException, Request, status

# Airflow's API modules are imported when a request needs them: this module is loaded with the
# plugin by every Airflow component, and only the api-server serves the app.


async def current_user(request: Request) -> Any:
    """Return the authenticated user: 401 without a token, 403 with an invalid one.

    Delegates to the api-server's own ``get_user`` (bearer header first, then the ``_token``
    cookie of the UI session, or the user a trusted Airflow middleware already resolved).

    :param request: the request.
    """
    from airflow.api_fastapi.core_api.security import bearer_scheme, get_user

    credentials = await bearer_scheme(request)
    return await get_user(request, None, credentials)


#: The authenticated user, as a route parameter type.
User = Annotated[Any, Depends(current_user)]


def _team(dag_id: str) -> str | None:
    from airflow.models.dag import DagModel

    try:
        return DagModel.get_team_name(dag_id)
    except Exception:  # noqa: BLE001 - a DAG unknown to the metadata DB has no team
        return None


#: What a user may do on a DAG's data: read it (``GET``) or edit it (``PUT``).
Method = Literal["GET", "PUT"]


def is_authorized(user: Any, dag_id: str | None, method: Method) -> bool:
    """Return whether the auth manager lets ``user`` do ``method`` on a DAG (``None``: on DAGs in general).

    :param user: the authenticated user.
    :param dag_id: the DAG that wrote the data.
    :param method: ``GET`` to read, ``PUT`` to edit.
    """
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.auth.managers.models.resource_details import DagDetails

    details = DagDetails(id=dag_id, team_name=_team(dag_id)) if dag_id else None
    return bool(get_auth_manager().is_authorized_dag(method=method, details=details, user=user))


def readable(user: Any, dag_ids: Iterable[str | None]) -> tuple[set[str], bool]:
    """Split the DAGs that wrote some data into the ones ``user`` may read.

    :param user: the authenticated user.
    :param dag_ids: DAG ids, ``None`` for data written outside Airflow.
    :return: the readable DAG ids, and whether data with no DAG is readable.
    """
    ids = set(dag_ids)
    allowed = {d for d in ids if d is not None and is_authorized(user, d, "GET")}
    unowned = None in ids and is_authorized(user, None, "GET")
    return allowed, unowned


def require(user: Any, dag_id: str | None, method: Method) -> None:
    """Raise 403 unless ``user`` may do ``method`` on the DAG.

    :param user: the authenticated user.
    :param dag_id: the DAG.
    :param method: ``GET`` or ``PUT``.
    """
    if not is_authorized(user, dag_id, method):
        what = "read" if method == "GET" else "edit"
        raise HTTPException(status.HTTP_403_FORBIDDEN, f"not allowed to {what} DAG {dag_id or '(any)'}")


def user_name(user: Any) -> str:
    """Return the name recorded with a hand mark.

    :param user: the authenticated user.
    """
    return str(user.get_name() or user.get_id())


def _secret() -> bytes:
    from airflow.configuration import conf

    secret = conf.get("api", "secret_key", fallback=None) or conf.get("core", "fernet_key", fallback="")
    return hashlib.sha256(f"metric-gate-ui:{secret}".encode()).digest()


#: How long a mark form's token is accepted after the page was served.
FORM_TOKEN_TTL_SECONDS = 3600
#: Tokens used by this api-server process, by nonce, with their expiry (pruned as they expire).
_USED: dict[str, float] = {}
_USED_LOCK = threading.Lock()
_MAX_USED = 100_000


def run_state(run: Any) -> str:
    """What a mark changes about a run: a token for the run as it is is void once the run is marked.

    :param run: the store's run (``status``, ``status_reason`` and the provenance list ``marks``).
    """
    marks = (getattr(run, "provenance", None) or {}).get("marks") or []
    return f"{run.status}\n{run.status_reason or ''}\n{len(marks)}"


def _mac(user: Any, run_id: str, action: str, state: str, expires: int, nonce: str) -> str:
    message = "\n".join([str(user.get_id()), run_id, action, state, str(expires), nonce]).encode()
    return hmac.new(_secret(), message, hashlib.sha256).hexdigest()


def form_token(user: Any, run: Any, action: str, *, now: float | None = None) -> str:
    """Return the token of one mark form: this user, this run as it is now, this action, for a while.

    ``EXPIRES.NONCE.MAC``, the MAC (HMAC-SHA256 with the api-server's ``[api] secret_key``) over the
    user id, the store run id, the action (the status the form sets), the run's state
    (:func:`run_state`), the expiry and the nonce.

    :param user: the authenticated user.
    :param run: the store's run.
    :param action: ``trusted`` or ``untrusted``: what the form does.
    :param now: the current time (seconds since the epoch); default the clock.
    """
    expires = int((time.time() if now is None else now) + FORM_TOKEN_TTL_SECONDS)
    nonce = secrets.token_hex(12)
    return f"{expires}.{nonce}.{_mac(user, run.run_id, action, run_state(run), expires, nonce)}"


def check_form_token(user: Any, run: Any, action: str, token: str, *, now: float | None = None) -> None:
    """Raise 403 unless ``token`` is a token of :func:`form_token` for this user, run state and action,
    not expired and not used before; then count it used.

    Single use holds across api-server processes too: marking a run changes its state, which voids
    every token issued for the run as it was.

    :param user: the authenticated user.
    :param run: the store's run, as it is now.
    :param action: the status the form posts.
    :param token: the token the form posted.
    :param now: the current time (seconds since the epoch); default the clock.
    """
    now = time.time() if now is None else now
    refused = HTTPException(status.HTTP_403_FORBIDDEN, "invalid, used or expired form token; reload the page")
    expires_text, _, rest = token.partition(".")
    nonce, _, mac = rest.partition(".")
    if not (expires_text.isdigit() and len(expires_text) <= 12 and nonce and mac):
        raise refused
    expires = int(expires_text)
    if expires < now or expires > now + FORM_TOKEN_TTL_SECONDS + 60:
        raise refused
    if not hmac.compare_digest(_mac(user, run.run_id, action, run_state(run), expires, nonce), mac):
        raise refused
    with _USED_LOCK:
        if nonce in _USED:
            raise refused
        if len(_USED) >= _MAX_USED:
            for key in [k for k, until in _USED.items() if until < now]:
                del _USED[key]
        _USED[nonce] = expires
