"""What two test sessions on one machine must not share: database names and loopback ports.

``METRIC_GATE_TEST_DB_PREFIX`` (default ``metric_gate_test``) starts the name of every Postgres
database a session creates, so each suite can be told apart (and cleaned up) by its prefix.
``METRIC_GATE_TEST_PORTS`` (``LOW-HIGH``, e.g. ``21000-21999``) is the range the servers the tests
start on 127.0.0.1 bind to (the S3 server, the Airflow api-server and log servers of the system and
browser tests); by default the system picks any free port.
"""

from __future__ import annotations

import os
import random
import re
import socket
import uuid

DB_PREFIX_ENV = "METRIC_GATE_TEST_DB_PREFIX"
PORTS_ENV = "METRIC_GATE_TEST_PORTS"


def db_prefix() -> str:
    """The prefix of the databases this session creates (a Postgres identifier: letters, digits, ``_``)."""
    prefix = os.environ.get(DB_PREFIX_ENV, "metric_gate_test")
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,39}", prefix):
        raise ValueError(f"{DB_PREFIX_ENV}={prefix!r}: use letters, digits and '_' (at most 40, not a digit first)")
    return prefix


def database_name(kind: str = "") -> str:
    """A fresh database name: the prefix, ``kind`` if any, and a random part.

    :param kind: what the database is for (``sys_meta``, ...).
    """
    return "_".join(part for part in (db_prefix(), kind, uuid.uuid4().hex[:12]) if part)


def port_range() -> tuple[int, int] | None:
    """The ``(low, high)`` ports of ``METRIC_GATE_TEST_PORTS``, or ``None`` when it is not set."""
    text = os.environ.get(PORTS_ENV, "").strip()
    if not text:
        return None
    match = re.fullmatch(r"(\d+)-(\d+)", text)
    if not match or not 1024 <= int(match[1]) <= int(match[2]) <= 65535:
        raise ValueError(f"{PORTS_ENV}={text!r}: expected LOW-HIGH with 1024 <= LOW <= HIGH <= 65535")
    return int(match[1]), int(match[2])


def free_port() -> int:
    """A port on 127.0.0.1 that nothing listens on now: in ``METRIC_GATE_TEST_PORTS`` when it is set."""
    span = port_range()
    candidates = [0] if span is None else random.sample(range(span[0], span[1] + 1), span[1] - span[0] + 1)
    for port in candidates:
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return sock.getsockname()[1]
    raise RuntimeError(f"{PORTS_ENV}={os.environ[PORTS_ENV]!r}: no free port in that range")


def drop_store_tables(url: str) -> None:
    """Drop every table and sequence of the metric store (any schema version) from the Postgres database ``url``."""
    import psycopg2

    conn = psycopg2.connect(url)
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute("SELECT relkind FROM pg_class WHERE oid = to_regclass('metric_values')")
        kind = cur.fetchone()
        if kind and kind[0] == "v":  # schema version 6 on: a view over metric_points
            cur.execute("DROP VIEW metric_values")
        cur.execute("DROP TABLE IF EXISTS metric_values, metric_points, run_blocks, coordinates, declarations, runs, "
                    "metric_gate_schema CASCADE")
        cur.execute("DROP SEQUENCE IF EXISTS metric_gate_run_seq")
    conn.close()
