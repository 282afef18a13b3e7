"""The store's tables, created and upgraded by the package itself (SPEC section 7).

The table and column names of ``runs`` and ``metric_values`` are a public interface: users query
them.  Each migration is a list of statements per dialect; ``metric_gate_schema`` records the
version reached.  Statements are written once where the dialects agree; ``{ts}``, ``{bool}``,
``{float}`` and ``{json}`` are filled per dialect.
"""

from __future__ import annotations

SCHEMA_VERSION_TABLE = "metric_gate_schema"

_TYPES = {
    "sqlite": {"ts": "TEXT", "bool": "INTEGER", "float": "REAL", "json": "TEXT", "false": "0"},
    "postgres": {
        "ts": "TIMESTAMP WITH TIME ZONE",
        "bool": "BOOLEAN",
        "float": "DOUBLE PRECISION",
        "json": "TEXT",
        "false": "FALSE",
    },
}

_V1 = [
    f"""CREATE TABLE IF NOT EXISTS {SCHEMA_VERSION_TABLE} (
        version INTEGER NOT NULL,
        upgraded_at {{ts}} NOT NULL
    )""",
    """CREATE TABLE IF NOT EXISTS runs (
        run_id TEXT PRIMARY KEY,
        series TEXT NOT NULL,
        backend TEXT NOT NULL,
        suite TEXT NOT NULL,
        role TEXT NOT NULL CHECK (role IN ('baseline', 'shadow')),
        status TEXT NOT NULL CHECK (status IN ('pending', 'trusted', 'untrusted')),
        logical_date {ts} NOT NULL,
        created_at {ts} NOT NULL,
        updated_at {ts} NOT NULL,
        dag_id TEXT,
        airflow_run_id TEXT,
        try_number INTEGER,
        map_index INTEGER,
        commit_sha TEXT,
        training_job_id TEXT,
        provenance {json},
        declarations {json},
        selection_errors {json},
        status_reason TEXT,
        rebaseline {bool} NOT NULL DEFAULT {false}
    )""",
    "CREATE INDEX IF NOT EXISTS runs_baseline_idx ON runs (series, backend, suite, role, status, logical_date)",
    "CREATE INDEX IF NOT EXISTS runs_airflow_run_idx ON runs (airflow_run_id)",
    "CREATE INDEX IF NOT EXISTS runs_commit_idx ON runs (commit_sha)",
    """CREATE TABLE IF NOT EXISTS metric_values (
        run_id TEXT NOT NULL,
        metric_key TEXT NOT NULL,
        steps_key TEXT NOT NULL,
        constraint_key TEXT NOT NULL,
        step INTEGER NOT NULL,
        value {float} NOT NULL,
        at_step INTEGER,
        ordinal INTEGER NOT NULL,
        CONSTRAINT metric_values_run_coordinate_key
            UNIQUE (run_id, metric_key, steps_key, constraint_key, step)
    )""",
    # metric_values.run_id names a runs row; the store writes both in one transaction, so no foreign
    # key is declared (its per-row check would dominate the bulk load of a night's values).
    # History of one coordinate across runs (``metric-gate history``) walks this index.
    "CREATE INDEX IF NOT EXISTS metric_values_coordinate_idx "
    "ON metric_values (metric_key, steps_key, constraint_key, step)",
]

# Version 2: steps up to 2**63 - 1 on Postgres (SQLite's INTEGER is already 64-bit).  Rewrites
# metric_values once, in the upgrade's transaction.
_V2 = {
    "postgres": ["ALTER TABLE metric_values ALTER COLUMN step TYPE BIGINT, ALTER COLUMN at_step TYPE BIGINT"],
    "sqlite": [],
}

# Version 3: the runs of one series identity in logical-date order: the UI's runs page and the
# history of a coordinate over nights (each run's value is then one lookup in the run-coordinate key).
_V3 = ["CREATE INDEX IF NOT EXISTS runs_series_date_idx ON runs (series, backend, suite, logical_date, run_id)"]

# Version 4: what each declaration's night was (the calibrated policy's trust per declaration, its
# level shifts and drifts, and the cause of an untrusted night), as JSON written with the status.
_V4 = ["ALTER TABLE runs ADD COLUMN outcomes {json}"]

# Version 5: which write of a run id its values are (one more each time the run is written again),
# so that a verdict is kept only for the values it judged (two writers of one night never leave one
# writer's values with the other's status: see ``MetricStore.set_status``).
_V5 = ["ALTER TABLE runs ADD COLUMN write_version INTEGER NOT NULL DEFAULT 0"]

#: Every migration in order; version N is MIGRATIONS[N - 1]: statements for both dialects, or a
#: dialect -> statements mapping where they differ.
MIGRATIONS: list[list[str] | dict[str, list[str]]] = [_V1, _V2, _V3, _V4, _V5]
SCHEMA_VERSION = len(MIGRATIONS)


def migration_statements(version: int, dialect: str) -> list[str]:
    """Return the statements that bring the schema from ``version - 1`` to ``version``.

    :param version: the target version (1-based).
    :param dialect: ``"sqlite"`` or ``"postgres"``.
    """
    types = _TYPES[dialect]
    migration = MIGRATIONS[version - 1]
    statements = migration[dialect] if isinstance(migration, dict) else migration
    return [stmt.format(**types) for stmt in statements]
