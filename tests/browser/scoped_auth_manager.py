"""The simple auth manager, plus users that may read no DAG at all (for the deny path of the UI test).

Airflow's simple auth manager maps roles (viewer, user, op, admin) to permissions on every DAG alike:
it cannot deny one DAG to a viewer.  The UI test runs the api-server with this subclass so that a
logged-in user named in ``METRIC_GATE_TEST_DAGLESS_USERS`` (comma separated) is refused every DAG by
``is_authorized_dag``, the one call the plugin asks.
"""

from __future__ import annotations

import os

from airflow.api_fastapi.auth.managers.simple.simple_auth_manager import SimpleAuthManager


class DagScopedAuthManager(SimpleAuthManager):
    """Simple auth manager whose "dagless" users may read and edit no DAG."""

    def is_authorized_dag(self, *, method, user, access_entity=None, details=None):  # noqa: ANN001, ANN201
        dagless = {u for u in os.environ.get("METRIC_GATE_TEST_DAGLESS_USERS", "").split(",") if u}
        if user.get_name() in dagless:
            return False
        return super().is_authorized_dag(method=method, user=user, access_entity=access_entity, details=details)
