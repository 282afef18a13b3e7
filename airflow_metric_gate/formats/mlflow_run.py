"""Reading an MLflow run as a record: every logged point of every metric, from its paginated history.

A run is named by a location string, in one of two forms::

    runs:/<run id>
    experiments:/<experiment name>?tag.<key>=<value>[&tag.<key>=<value>...]

The second names the most recently started run of the experiment carrying all those tags (a
nightly job tags its run with the night, say ``tag.night=2026-11-30``).  Either form may add
``tracking_uri=<uri>`` to its query (``runs:/<id>?tracking_uri=http://mlflow:5000``); without
it, MLflow's own setting ``MLFLOW_TRACKING_URI`` is used, and with neither the location is bad
input (the gate never falls back to a local store it would create).  Values in the query are
percent-decoded.

A run is complete when its status is ``FINISHED``; ``RUNNING`` and ``SCHEDULED`` runs are not
ready yet, ``FAILED`` and ``KILLED`` runs are bad input.  Each metric's history is read through
MLflow's paginated metric history (bounded pages of MLflow's client, never the sampled
bulk-interval endpoint), ordered by log time: a point logged again at a step replaces the earlier
one there, as a later line does in a JSON Lines file (SPEC 2).  A NaN logged stays NaN.

Needs the ``mlflow`` extra (``mlflow-skinny``: the client only).
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit

from airflow_metric_gate.records import Record, RecordError, add_log_points

#: The status of a complete run, and those of runs still under way.
FINISHED = "FINISHED"
UNDER_WAY = ("RUNNING", "SCHEDULED")
# Error codes of the tracking server that mean the request itself is wrong (retrying cannot help).
_BAD_REQUEST_CODES = frozenset({"RESOURCE_DOES_NOT_EXIST", "INVALID_PARAMETER_VALUE", "BAD_REQUEST",
                                "PERMISSION_DENIED", "UNAUTHENTICATED", "ENDPOINT_NOT_FOUND"})
_FORMS = "runs:/<run id> or experiments:/<experiment name>?tag.<key>=<value>"


@dataclass(frozen=True)
class RunLocation:
    """An MLflow run, as a location names it.

    :param tracking_uri: the tracking server (or store) URI.
    :param run_id: the run id (``runs:/`` form), else ``None``.
    :param experiment: the experiment name (``experiments:/`` form), else ``None``.
    :param tags: the tags the run must carry (``experiments:/`` form).
    :param uri_written: whether the location wrote the tracking URI (else it came from
        ``MLFLOW_TRACKING_URI``, and :func:`run_location` leaves it out).
    """

    tracking_uri: str
    run_id: str | None = None
    experiment: str | None = None
    tags: dict[str, str] = field(default_factory=dict)
    uri_written: bool = True

    def describe(self) -> str:
        """The run for messages: ``MLflow run <id>`` or the experiment and tags looked for."""
        if self.run_id is not None:
            return f"MLflow run {self.run_id} (tracking URI {_redact(self.tracking_uri)})"
        tags = ", ".join(f"{k}={v}" for k, v in self.tags.items())
        uri = _redact(self.tracking_uri)
        return f"the MLflow run of experiment {self.experiment!r} tagged {tags} (tracking URI {uri})"


def _redact(uri: str) -> str:
    from airflow_metric_gate.storage import redact

    return redact(uri)


def parse_location(location: Any) -> RunLocation:
    """Parse a run location (see the module docstring).

    :param location: the location string.
    :raises RecordError: the location is not one of the two forms, or no tracking URI is known.
    """
    if not isinstance(location, str) or not location.strip():
        raise RecordError(f"an mlflow record is named {_FORMS}; got {location!r}")
    text = location.strip()
    parts = urlsplit(text)
    try:
        query = parse_qsl(parts.query, keep_blank_values=True, strict_parsing=bool(parts.query))
    except ValueError:
        raise RecordError(f"the query of the MLflow location is not key=value pairs joined by '&' ({_FORMS})",
                          path=text) from None
    tracking_uri = None
    tags: dict[str, str] = {}
    for key, value in query:
        if key == "tracking_uri":
            tracking_uri = value
        elif key.startswith("tag.") and len(key) > 4 and "`" not in key:
            tags[key[4:]] = value
        else:
            raise RecordError(f"unknown query parameter {key!r} (expected tag.<key>=<value> or tracking_uri=<uri>)",
                              path=text)
    uri_written = bool(tracking_uri)
    tracking_uri = tracking_uri or os.environ.get("MLFLOW_TRACKING_URI") or None
    if not tracking_uri:
        raise RecordError("no MLflow tracking URI: add ?tracking_uri=<uri> to the location or set MLFLOW_TRACKING_URI",
                          path=text)
    name = unquote((parts.netloc + parts.path).lstrip("/"))
    if parts.scheme == "runs" and name and "/" not in name:
        if tags:
            raise RecordError("a runs:/ location names one run: tags select runs of an experiments:/ location",
                              path=text)
        return RunLocation(tracking_uri, run_id=name, uri_written=uri_written)
    if parts.scheme == "experiments" and name:
        if not tags:
            raise RecordError("an experiments:/ location needs at least one tag.<key>=<value> to pick the night's run",
                              path=text)
        return RunLocation(tracking_uri, experiment=name, tags=tags, uri_written=uri_written)
    raise RecordError(f"an mlflow record is named {_FORMS}", path=text)


def _client(where: RunLocation) -> Any:
    try:
        from mlflow.tracking import MlflowClient
    except ImportError as err:
        raise RecordError(f"the mlflow record format needs the 'mlflow' extra: pip install "
                          f"'airflow-metric-gate[mlflow]' ({err})") from None
    return MlflowClient(tracking_uri=where.tracking_uri)


def _call(where: RunLocation, what: str, function: Any, *args: Any, **kwargs: Any) -> Any:
    """Call the tracking server; its errors become bad input (the request) or StorageUnavailable (the server)."""
    from mlflow.exceptions import MlflowException

    from airflow_metric_gate.storage import StorageUnavailable

    try:
        return function(*args, **kwargs)
    except MlflowException as err:
        if err.error_code in _BAD_REQUEST_CODES:
            raise RecordError(f"{what}: {err.message}", path=where.describe()) from None
        raise StorageUnavailable(f"the MLflow tracking server could not {what}: {err.message}") from err
    except OSError as err:  # requests' connection errors are OSErrors
        raise StorageUnavailable(f"the MLflow tracking server could not {what}: {err}") from err


def find_run(where: RunLocation) -> Any:
    """Return the run a location names, or ``None`` when an ``experiments:/`` location matches no run yet.

    :param where: the parsed location.
    :raises RecordError: a ``runs:/`` location names no run.
    :raises StorageUnavailable: the tracking server could not be reached.
    """
    client = _client(where)
    if where.run_id is not None:
        return _call(where, "read the run", client.get_run, where.run_id)
    experiment = _call(where, "look up the experiment", client.get_experiment_by_name, where.experiment)
    if experiment is None:
        return None
    conditions = " and ".join(f"tags.`{key}` = {_quote(where, value)}" for key, value in where.tags.items())
    runs = _call(where, "search the runs", client.search_runs, [experiment.experiment_id],
                 filter_string=conditions, order_by=["attributes.start_time DESC"], max_results=1)
    return runs[0] if runs else None


def _quote(where: RunLocation, value: str) -> str:
    """A tag value as a string literal of MLflow's search filter (which has no escapes)."""
    for quote in ("'", '"'):
        if quote not in value:
            return f"{quote}{value}{quote}"
    raise RecordError("a tag value holding both ' and \" cannot be searched for in MLflow", path=where.describe())


def run_problem(where: RunLocation, run: Any) -> tuple[bool, str]:
    """Say whether a run is complete: ``(True, reason)``, or ``(False, reason)`` while it is under way.

    :param where: the parsed location.
    :param run: the run :func:`find_run` returned (``None``: no run matches yet).
    :raises RecordError: the run failed or was killed.
    """
    if run is None:
        return False, f"no run matches yet: {where.describe()}"
    status = run.info.status
    name = f"MLflow run {run.info.run_id}"
    if status == FINISHED:
        return True, f"{name} is FINISHED"
    if status in UNDER_WAY:
        return False, f"{name} is {status}: a run is gated once it is FINISHED"
    raise RecordError(f"the run ended {status}: a night whose training did not finish is not gated",
                      path=where.describe())


def run_location(where: RunLocation, run_id: str) -> str:
    """The location of one run (``runs:/<id>``), with the tracking URI when the location wrote it.

    A tracking URI taken from ``MLFLOW_TRACKING_URI`` stays out: it may hold credentials, and the
    location travels through XCom and logs.

    :param where: the parsed location the run was found by.
    :param run_id: the run found.
    """
    if not where.uri_written:
        return f"runs:/{run_id}"
    return f"runs:/{run_id}?{urlencode({'tracking_uri': where.tracking_uri}, safe=':/')}"


def pin_location(location: Any) -> str:
    """The ``runs:/<id>`` location of the run a location names now (an ``experiments:/`` one resolved).

    Ingest pins the run so that the next tasks read that very run, even if the job starts another
    run with the same tags meanwhile.

    :param location: the run location.
    :raises RecordError: the location is bad, or no run matches it.
    :raises StorageUnavailable: the tracking server could not be reached.
    """
    where = parse_location(location)
    if where.run_id is not None:
        return location.strip()
    run = find_run(where)
    if run is None:
        raise RecordError("no such run: no run of the experiment carries those tags", path=where.describe())
    return run_location(where, run.info.run_id)


def read_run(location: Any) -> Record:
    """Read every point of every metric of a FINISHED run.

    :param location: the run location (see the module docstring).
    :raises RecordError: the location is bad, the run does not exist, is still running or failed.
    :raises StorageUnavailable: the tracking server could not be reached.
    """
    where = parse_location(location)
    run = find_run(where)
    if run is None:
        raise RecordError("no such run: no run of the experiment carries those tags", path=where.describe())
    complete, reason = run_problem(where, run)
    if not complete:
        raise RecordError(f"not complete: {reason}", path=where.describe())
    client = _client(where)
    run_id = run.info.run_id
    source = f"mlflow run {run_id}"
    per_metric: dict[str, tuple[list, list, list, list]] = {}
    for key in sorted(run.data.metrics):
        history = _call(where, f"read the history of metric {key!r}", client.get_metric_history, run_id, key)
        history = sorted(history, key=attrgetter("timestamp"))  # stable: the server's order within a timestamp
        steps: list[int | None] = []
        values: list[object] = []
        invalid: list[tuple[object, object, str]] = []
        for number, metric in enumerate(history, 1):
            step, value = metric.step, metric.value
            if isinstance(step, int) and step >= 0:
                steps.append(step)
            else:
                steps.append(None)
                invalid.append((step, value, f"point {number} of its history"))
            values.append(value)
        per_metric[key] = (steps, values, invalid, [])  # MLflow values are always numbers
    metrics: dict[str, Any] = {}
    invalid_steps: dict[str, Any] = {}
    add_log_points(per_metric, source, metrics, invalid_steps)
    return Record(metrics, [source], [], invalid_steps)


def record_checksum(record: Record) -> str:
    """The SHA-256 of a run's content as read (its points), pinning it from ingest to persist.

    :param record: the record :func:`read_run` returned.
    """
    sha = hashlib.sha256()
    sha.update(json.dumps(record.sources).encode())
    for metric in record:
        sha.update(json.dumps([metric, record[metric]], allow_nan=True).encode())
    return sha.hexdigest()
