"""Helpers the benchmark scripts share (they run as scripts, so this folder is on ``sys.path``)."""

from __future__ import annotations

import gc
import time
import uuid
from collections.abc import Callable
from urllib.parse import urlsplit, urlunsplit


def fresh_database(admin_url: str, prefix: str) -> tuple[str, Callable[[], None]]:
    """Create a Postgres database of its own; return its URL and the function that drops it.

    :param admin_url: a URL of the server to create it on.
    :param prefix: the start of the database's name (a random suffix follows).
    """
    import psycopg2

    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    admin = psycopg2.connect(admin_url)
    admin.autocommit = True
    with admin.cursor() as cur:
        cur.execute(f'CREATE DATABASE "{name}"')
    parts = urlsplit(admin_url)
    url = urlunsplit((parts.scheme, parts.netloc, f"/{name}", parts.query, parts.fragment))

    def drop() -> None:
        with admin.cursor() as cur:
            cur.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.close()

    return url, drop


def best_of(repeat: int, fn: Callable[[], object]) -> float:
    """Return the fastest of ``repeat`` timed calls (seconds), each after a full collection."""
    times = []
    for _ in range(repeat):
        gc.collect()
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)
