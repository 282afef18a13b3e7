"""The documented limits on what the gate accepts, and the checks that enforce them before any write.

Every limit here is checked up front, as bad input: the CLI exits 2 and the operators fail without
retry, and nothing is stored.  A limit exists because the store (an index row, a column type, a
statement size) or the readers (nesting, YAML aliases) could not serve a larger value, and a value
over it would otherwise fail half-way, or be mistaken for a store outage.  ``docs/cli.md`` lists
them under "Limits".
"""

from __future__ import annotations

from datetime import datetime, timezone

from airflow_metric_gate.dates import utc

#: The largest step a record, a ``steps`` list or a stored value may hold (a signed 64-bit integer).
MAX_STEP = 2**63 - 1
#: ``metric_key`` at most this many bytes of UTF-8.
MAX_METRIC_KEY_BYTES = 512
#: ``steps_key`` (canonical JSON of a ``steps`` literal) at most this many bytes of UTF-8.
MAX_STEPS_KEY_BYTES = 1024
#: ``constraint_key`` (canonical JSON of a ``constraint`` literal) at most this many bytes of UTF-8.
MAX_CONSTRAINT_KEY_BYTES = 256
#: ``series``, ``backend``, ``suite``, the store run id and the indexed provenance fields
#: (``dag_id``, ``airflow_run_id``, ``commit_sha``, ``training_job_id``) at most this many bytes.
MAX_NAME_BYTES = 256
#: The largest ``history_limit``: baseline runs read by one statement.
MAX_HISTORY_LIMIT = 500
#: Gates files (YAML and JSON) may nest mappings and lists at most this deep.
MAX_NESTING_DEPTH = 64
#: A YAML gates file may use at most this many aliases (``*name``).
MAX_YAML_ALIASES = 1000
#: A YAML gates file may hold at most this many nodes once its aliases are expanded.
MAX_YAML_NODES = 100_000
#: Logical dates (UTC) from the start of year 1000 to the end of 9998: every store keeps them, and
#: any time zone offset leaves them inside Python's dates.
MIN_LOGICAL_DATE = datetime(1000, 1, 1, tzinfo=timezone.utc)
MAX_LOGICAL_DATE = datetime(9999, 1, 1, tzinfo=timezone.utc)


def key_problem(value: object, max_bytes: int) -> str | None:
    """Return why ``value`` cannot be stored as a key, or ``None`` when it can.

    A key is text with no NUL character, no lone surrogate (it must encode to UTF-8) and at most
    ``max_bytes`` bytes of UTF-8.

    :param value: the key.
    :param max_bytes: the key's limit.
    """
    if not isinstance(value, str):
        return f"must be a string, got {type(value).__name__}"
    if "\x00" in value:
        return "contains a NUL character"
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError as err:
        return f"contains a lone surrogate ({value[err.start]!r}): not valid Unicode text"
    if size > max_bytes:
        return f"is {size} bytes of UTF-8, more than the {max_bytes} allowed"
    return None


def step_problem(step: object) -> str | None:
    """Return why ``step`` is not a storable step (an int from 0 to :data:`MAX_STEP`), or ``None``.

    :param step: the step.
    """
    if type(step) is not int or step < 0:
        return f"must be an integer >= 0, got {step!r}"
    if step > MAX_STEP:
        return f"must be at most {MAX_STEP} (2**63 - 1), got {step}"
    return None


def history_limit_problem(history_limit: object) -> str | None:
    """Return why ``history_limit`` is out of range (1 to :data:`MAX_HISTORY_LIMIT`), or ``None``.

    :param history_limit: baseline runs to compare with.
    """
    if type(history_limit) is not int or not 1 <= history_limit <= MAX_HISTORY_LIMIT:
        return f"history_limit must be an integer from 1 to {MAX_HISTORY_LIMIT}, got {history_limit!r}"
    return None


def logical_date_problem(value: datetime) -> str | None:
    """Return why a logical date is out of range, or ``None`` when it is inside it.

    :param value: an aware datetime (naive ones are taken as UTC).
    """
    try:
        when = utc(value)
    except OverflowError:
        when = None
    if when is None or not MIN_LOGICAL_DATE <= when < MAX_LOGICAL_DATE:
        return (
            f"logical date {value.isoformat()} is out of range: it must fall (in UTC) from "
            f"{MIN_LOGICAL_DATE:%Y-%m-%d} to before {MAX_LOGICAL_DATE:%Y-%m-%d}"
        )
    return None
