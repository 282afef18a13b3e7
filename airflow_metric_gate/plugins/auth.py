"""Who may see and mark what in the "Metric gate" UI, asked of Airflow's own auth manager.

A plugin's FastAPI app is not protected by Airflow on its own: every route depends on
:func:`current_user` (the api-server's ``get_user``: a ``Authorization: Bearer`` JWT, or the
``_token`` cookie the Airflow UI sets at login) and then asks the configured auth manager:

* reading a series or a verdict needs ``GET`` on the DAG that wrote it (``runs.dag_id``); runs
  written outside Airflow (no DAG) need ``GET`` on DAGs in general;
* marking a run trusted or untrusted needs ``PUT`` (edit) on that DAG.

Forms that change something carry a token tied to the user and the run (an HMAC with the
api-server's ``[api] secret_key``), so another site cannot post them with the user's cookie.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable
from typing import Annotated, Any

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


def is_authorized(user: Any, dag_id: str | None, method: str) -> bool:
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


def require(user: Any, dag_id: str | None, method: str) -> None:
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


def form_token(user: Any, run_id: str) -> str:
    """Return the token a mark form of ``run_id`` carries for ``user``.

    :param user: the authenticated user.
    :param run_id: the store run id.
    """
    message = f"{user.get_id()}\n{run_id}".encode()
    return hmac.new(_secret(), message, hashlib.sha256).hexdigest()


def check_form_token(user: Any, run_id: str, token: str) -> None:
    """Raise 403 unless ``token`` is the one :func:`form_token` gives.

    :param user: the authenticated user.
    :param run_id: the store run id.
    :param token: the token the form posted.
    """
    if not hmac.compare_digest(form_token(user, run_id), token):
        raise HTTPException(status.HTTP_403_FORBIDDEN, "invalid or expired form token; reload the page")
