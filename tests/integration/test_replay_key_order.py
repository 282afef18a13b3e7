"""Replay reads a night's values in the order of their keys, not in the order they were declared.

The values of a night come from the store ordered by ``(metric_key, steps_key, constraint_key,
step)``, the text compared byte by byte as the database stores it: these tests declare metrics in
an order that is not that one, list steps unsorted, and use keys whose order differs between code
points, a natural-language collation and the bytes of other text encodings, then check that
replay judges every value against its own coordinate exactly as evaluation did.
"""

from __future__ import annotations

import random
import sqlite3
from datetime import datetime, timedelta, timezone
from urllib.parse import urlsplit, urlunsplit

import pytest
from _test_env import database_name

from airflow_metric_gate.declarations import declare
from airflow_metric_gate.pipeline import RunInfo, SeriesIdentity, evaluate, persist
from airflow_metric_gate.replay import replay
from airflow_metric_gate.selection import Selection
from airflow_metric_gate.store import open_store

T0 = datetime(2026, 4, 1, tzinfo=timezone.utc)
IDENTITY = SeriesIdentity("key-order", "cuda", "nightly")
STEPS = [7, 2, 5, 0]  # listed unsorted: stored in this order, read back in step order
# Declared in neither code-point order (Z < _ < z < ä) nor dictionary order (_ a ä z); levels far
# apart, so a value judged against another metric's history would fail.
LEVELS = {"zeta/loss": 2.0, "Zeta/kl": 0.02, "_x/reward": 5.0, "ä/grad_norm": 1.5}
# Code point order: А (U+0410) before ё (U+0451); windows-1251 bytes: ё (0xB8) before А (0xC0).
CYRILLIC = {"ё/loss": 50.0, "zeta/kl": 0.02, "А/loss": 2.0}
# Code point order: ÿ (U+00FF) before Ā (U+0100); UTF-16LE bytes: Ā (00 01) before ÿ (FF 00).
LATIN = {"Ā/loss": 50.0, "zeta/kl": 0.02, "ÿ/loss": 2.0}


def _night(rng: random.Random, declarations: list, levels: dict[str, float]) -> list[Selection]:
    selections = []
    for d in declarations:
        shift = rng.choice([0.0] * 6 + [0.2])  # now and then a night leaves the band
        points = [(step, levels[d.metric_key] * (1 + 0.01 * rng.gauss(0, 1) + shift), step) for step in STEPS]
        selections.append(Selection(d, points=points))
    return selections


def _check_replay_matches_evaluation(store, levels: dict[str, float] = LEVELS) -> None:
    declarations = [declare(metric, steps=STEPS, constraint={"rel_up": 0.05, "rel_down": 0.05}) for metric in levels]
    rng = random.Random(4)
    verdicts = {}
    for night in range(12):
        run_id = f"night-{night:02d}"
        persist(store, IDENTITY, RunInfo(run_id, logical_date=T0 + timedelta(days=night)),
                _night(rng, declarations, levels))
        verdicts[run_id] = evaluate(store, run_id, all_results=True, max_results=None)

    report = replay(store, IDENTITY.series, IDENTITY.backend, IDENTITY.suite)

    replayed = {}  # (run_id, metric) -> (step, ref, current) of each FAIL
    for gate in report["declarations"]:
        for night in gate["failed"]:
            replayed[night["run_id"], gate["metric_key"]] = sorted(
                (r["step"], r["ref"], r["current"]) for r in night["results"])
    evaluated = {}
    for run_id, verdict in verdicts.items():
        for r in verdict["results"]:
            if r["status"] == "FAIL":
                evaluated.setdefault((run_id, r["metric_key"]), []).append((r["step"], r["ref"], r["current"]))
    assert replayed == {k: sorted(v) for k, v in evaluated.items()}
    assert len(evaluated) >= 3  # the series has failing nights to compare
    for night in report["nights"]:
        verdict = verdicts[night["run_id"]]
        assert night["stored_status"] == night["replayed_status"]
        assert night["counts"] == {s: c for s, c in verdict["counts"].items() if c}


def test_replay_judges_each_value_against_its_own_coordinate(store):
    _check_replay_matches_evaluation(store)


@pytest.fixture
def pg_database_with(pg_database_url):
    """Create fresh Postgres databases with ``CREATE DATABASE`` options; yield their URLs; drop them after."""
    import psycopg2

    admin = psycopg2.connect(pg_database_url)
    admin.autocommit = True
    names = []

    def create(options: str) -> str:
        name = database_name()
        with admin.cursor() as cur:
            cur.execute(f'CREATE DATABASE "{name}" TEMPLATE template0 {options}')
        names.append(name)
        parts = urlsplit(pg_database_url)
        return urlunsplit((parts.scheme, parts.netloc, f"/{name}", parts.query, parts.fragment))

    try:
        yield create
    finally:
        with admin.cursor() as cur:
            for name in names:
                cur.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.close()


@pytest.mark.postgres
@pytest.mark.slow
def test_replay_on_a_database_that_sorts_text_by_dictionary_order(pg_database_with):
    with open_store(pg_database_with("LOCALE 'C.UTF-8'")) as plain, plain._transaction() as cur:
        plain._execute(cur, "SELECT count(*) FROM pg_collation WHERE collprovider = 'i'")
        if cur.fetchone()[0] == 0:
            pytest.skip("this Postgres server is built without ICU collations")
    with open_store(pg_database_with("LOCALE_PROVIDER icu ICU_LOCALE 'und' LOCALE 'C.UTF-8'")) as store:
        with store._transaction() as cur:  # the database's own order is not the code-point order
            store._execute(cur, "SELECT k FROM (VALUES ('zeta/loss'), ('Zeta/kl'), ('_x/reward')) t(k) ORDER BY k")
            assert [k for (k,) in cur.fetchall()] != sorted(["zeta/loss", "Zeta/kl", "_x/reward"])
        _check_replay_matches_evaluation(store)


@pytest.mark.postgres
def test_replay_on_a_database_that_does_not_store_text_as_utf8(pg_database_with):
    # windows-1251 stores a letter in one byte, in another order than UTF-8
    with open_store(pg_database_with("ENCODING 'WIN1251' LC_COLLATE 'C' LC_CTYPE 'C'")) as store:
        _check_replay_matches_evaluation(store, CYRILLIC)


def test_replay_on_a_sqlite_file_that_stores_text_as_utf16(tmp_path):
    path = tmp_path / "utf16.db"
    conn = sqlite3.connect(path)  # the encoding is fixed when the file gets its first table
    conn.execute("PRAGMA encoding = 'UTF-16le'")
    conn.execute("CREATE TABLE first (x)")
    conn.execute("DROP TABLE first")
    conn.close()
    with open_store(f"sqlite:///{path}") as store:
        assert store._connection().execute("PRAGMA encoding").fetchone()[0] == "UTF-16le"
        _check_replay_matches_evaluation(store, LATIN)
