"""No store-wide lock, and bounded stalls (issue 19, item 5).

A TCP proxy on loopback, started by the test, stands between one client and Postgres.  It goes
silent (keeps its connections open, forwards nothing either way) right after that client sent a
chosen statement, as a network or a host that stops answering does.  Other series' writes and
reads must go on; the stalled client must be cut off within its documented time; the server must
end the stalled session, so that even the stalled run's own id can be written again; once the
proxy resumes, the stalled client's store works again.
"""

from __future__ import annotations

import re
import socket
import threading
import time
from datetime import datetime, timezone
from urllib.parse import urlsplit, urlunsplit

import pytest

from airflow_metric_gate.declarations.resolution import declare
from airflow_metric_gate.pipeline import evaluate
from airflow_metric_gate.store import RunRow, StoreUnavailable, ValueRow, open_store

pytestmark = pytest.mark.postgres

GATE = declare("m", steps="all", constraint={"rel_up": 0.2, "rel_down": 0.2})


class SilentProxy:
    """A loopback TCP proxy that goes silent after a client message matching ``stall_on``, until resumed."""

    def __init__(self, target: tuple[str, int], stall_on: bytes) -> None:
        self.target = target
        self.stall_on = re.compile(stall_on)
        self.running = threading.Event()
        self.running.set()
        self.stalled_on: bytes | None = None
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.target)
            self.sockets += [client, server]
            threading.Thread(target=self._pump, args=(client, server, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, False), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, from_client: bool) -> None:
        while True:
            try:
                data = src.recv(65536)
            except OSError:
                return
            if not data:
                return
            self.running.wait()  # silent: the bytes are held, nothing is forwarded
            try:
                dst.sendall(data)
            except OSError:
                return
            if from_client and self.stalled_on is None and self.stall_on.search(data):
                self.stalled_on = self.stall_on.search(data).group(0)
                self.running.clear()

    def resume(self) -> None:
        self.running.set()

    def close(self) -> None:
        self.resume()
        self.listener.close()
        for s in self.sockets:
            s.close()


def _through(url: str, port: int, query: str) -> str:
    parts = urlsplit(url)
    netloc = parts.netloc.rsplit("@", 1)
    host = f"127.0.0.1:{port}"
    return urlunsplit((parts.scheme, f"{netloc[0]}@{host}" if len(netloc) == 2 else host, parts.path, query, ""))


def _night(run_id, series, day, value=1.0):
    run = RunRow(run_id=run_id, series=series, backend="cuda", suite="default", role="baseline", status="pending",
                 logical_date=datetime(2026, 11, day, tzinfo=timezone.utc), declarations=[GATE.summary()])
    return run, [ValueRow(i, GATE.metric_key, GATE.steps_key, GATE.constraint_key, i, value, i) for i in range(100)]


def _target(url):
    parts = urlsplit(url)
    return parts.hostname or "127.0.0.1", parts.port or 5432


@pytest.fixture
def upgraded(pg_url):
    with open_store(pg_url) as store:
        store.upgrade()
    return pg_url


@pytest.mark.slow
@pytest.mark.parametrize("stall_on", [
    # the first statement of a fresh client that would hold anything: the schema lock, or its run's row
    rb"pg_advisory_xact_lock|INSERT INTO runs",
    # making the month's partition (the night is the first of its month): the server ends it alone
    rb"ATTACH PARTITION",
], ids=["run-row", "new-month"])
def test_a_stalled_client_blocks_no_other_series_and_is_cut_off_in_time(upgraded, stall_on):
    proxy = SilentProxy(_target(upgraded), stall_on)
    stalled_url = _through(upgraded, proxy.port, "statement_timeout=2s&client_timeout=3s"
                           "&idle_in_transaction_session_timeout=2s&lock_timeout=2s")
    outcome: dict = {}

    def stalled_writer():
        start = time.monotonic()
        try:
            with open_store(stalled_url) as store:
                store.write_run(*_night("stalled", "a", 1))
        except Exception as exc:  # noqa: BLE001 - the test looks at what it was
            outcome["error"] = exc
        outcome["seconds"] = time.monotonic() - start

    writer = threading.Thread(target=stalled_writer, daemon=True)
    writer.start()
    try:
        deadline = time.monotonic() + 10
        while proxy.stalled_on is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert proxy.stalled_on is not None
        # other series, each through a store opened now (as every task opens its own): nothing waits
        for n, series in enumerate(("b", "c", "d"), start=1):
            start = time.monotonic()
            with open_store(upgraded + "?lock_timeout=10s&statement_timeout=20s") as other:
                other.write_run(*_night(f"{series}1", series, 1))
                other.write_run(*_night(f"{series}2", series, 2))
                assert evaluate(other, f"{series}2")["trusted"] is True
                assert [r.run_id for r in other.series_runs(series, "cuda", "default")] == [f"{series}2", f"{series}1"]
                assert len(other.list_runs()) >= 2 * n
            assert time.monotonic() - start < 1.5, f"series {series} waited for the stalled client"
        writer.join(timeout=10)
        assert not writer.is_alive(), "the stalled client was never cut off"
        assert isinstance(outcome["error"], StoreUnavailable)
        assert "client_timeout=3000ms" in str(outcome["error"])
        assert outcome["seconds"] < 3 + 2  # client_timeout, plus its own connection and start
        # the server ended the stalled session (idle in transaction): its run id can be written again
        start = time.monotonic()
        with open_store(upgraded + "?lock_timeout=10s") as other:
            other.write_run(*_night("stalled", "a", 1, value=2.0))
            assert {v.value for v in other.run_values("stalled")} == {2.0}
        assert time.monotonic() - start < 2 + 2  # idle_in_transaction_session_timeout, plus margin
    finally:
        proxy.resume()
    # resumed: the stalled client's store works again
    proxy.stall_on = re.compile(rb"(?!)")
    with open_store(stalled_url) as store:
        store.write_run(*_night("a2", "a", 2))
        assert store.get_run("a2").status == "pending"
    proxy.close()


def test_a_lock_wait_ends_at_lock_timeout_with_a_message_naming_it(upgraded):
    with open_store(upgraded) as holder, open_store(upgraded + "?lock_timeout=500ms") as waiter:
        holder.write_run(*_night("n", "a", 1))
        with holder._transaction() as cur:  # another writer of the same night, mid-write
            cur.execute("SELECT 1 FROM runs WHERE run_id = 'n' FOR UPDATE")
            start = time.monotonic()
            with pytest.raises(StoreUnavailable, match="lock_timeout=500ms"):
                waiter.write_run(*_night("n", "a", 1))
            assert time.monotonic() - start < 3


def test_connections_carry_keepalives_and_a_user_timeout_by_default(upgraded):
    with open_store(upgraded) as store:
        store.schema_version()
        params = store._conn.get_dsn_parameters()
        with store._transaction() as cur:
            cur.execute("SHOW idle_in_transaction_session_timeout")
            idle = cur.fetchone()[0]
            cur.execute("SHOW lock_timeout")
            lock = cur.fetchone()[0]
    assert (params["keepalives"], params["keepalives_idle"], params["tcp_user_timeout"]) == ("1", "30", "60000")
    assert (idle, lock) == ("1min", "1min")
