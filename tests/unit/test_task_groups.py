"""The metric_gate task group as the DAG parser sees it: tasks, wiring, arguments, mapping.

Runs of DAGs built with it are in tests/dags (test_nightly_metric_gate.py for one series,
test_mapped_gate_dag.py mapped over several).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pendulum
import pytest
from _fakes import FakeTI
from airflow.sdk import DAG, task
from airflow.sdk.exceptions import AirflowFailException

import airflow_metric_gate
from airflow_metric_gate import task_groups
from airflow_metric_gate.task_groups import metric_gate

ROOT = Path(__file__).resolve().parents[2]
STEPS = ("wait_for_record", "ingest_record", "select_steps", "persist_values", "evaluate_gate")
LOSS_GATE = {"metric_key": "loss", "steps": "all", "constraint": {"rel_up": 0.1, "rel_down": 0.1}}


def _dag(dag_id: str = "factory_probe") -> DAG:
    return DAG(dag_id, start_date=pendulum.datetime(2026, 1, 1, tz="UTC"), schedule=None)


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.dag


def _rendered(dag: DAG, task_id: str, field: str, map_index: int):
    """One templated field of a task as it renders at a map index (mapping arguments only)."""
    operator = dag.get_task(task_id)
    return operator.render_template(getattr(operator, field), {"ti": FakeTI(map_index=map_index)})


def test_is_public_and_lazily_imported():
    assert airflow_metric_gate.metric_gate is metric_gate
    assert "metric_gate" in airflow_metric_gate.__all__


def test_one_call_builds_the_five_tasks_in_a_line_with_their_arguments():
    with _dag() as dag:
        group = metric_gate(series="rl", path="/records/{{ ds }}", gates_file="gates.yaml", suite="s1", conn_id="db")
    assert group.group_id == "metric_gate"
    assert group.tooltip.startswith("Metric gate:") and "`evaluate_gate`" in group.doc_md  # not the docstring
    order = [f"metric_gate.{name}" for name in STEPS]
    assert dag.task_ids == order
    for upstream, downstream in zip(order, order[1:]):
        assert dag.get_task(downstream).upstream_task_ids == {upstream}
    sensor, _, select, persist, evaluate = (dag.get_task(t) for t in order)
    assert (sensor.path, sensor.marker, sensor.deferrable, sensor.poke_interval, sensor.timeout) == (
        "/records/{{ ds }}", "_SUCCESS", True, 300, 8 * 3600)
    assert (select.gates_file, select.gates) == ("gates.yaml", None)
    assert (persist.series, persist.backend, persist.suite, persist.role, persist.night, persist.conn_id) == (
        "rl", "cuda", "s1", "auto", None, "db")
    assert (evaluate.enforce, evaluate.conn_id) == (True, "db")
    assert group["evaluate_gate"] is evaluate  # its .output is the verdict, for a downstream task


def test_two_groups_in_one_dag_get_their_own_ids():
    with _dag() as dag:
        metric_gate(series="a", path="/a")
        metric_gate.override(group_id="gate_b")(series="b", path="/b", enforce=False)
        metric_gate(series="c", path="/c")
    assert set(dag.task_group_dict) == {"metric_gate", "gate_b", "metric_gate__1"}
    assert dag.get_task("gate_b.evaluate_gate").enforce is False
    assert dag.get_task("metric_gate__1.persist_values").series == "c"


def test_expand_kwargs_dicts_name_only_what_differs():
    with _dag() as dag:
        metric_gate.partial(gates_file="gates.yaml", enforce=False).expand_kwargs(
            [{"series": "a", "path": "/a"}, {"series": "b", "path": "/b", "backend": "rocm", "role": "shadow"}]
        )
    group = dag.task_group_dict["metric_gate"]
    assert type(group).__name__ == "MappedTaskGroup"
    assert dag.get_task("metric_gate.evaluate_gate").enforce is False
    identities = [
        tuple(_rendered(dag, "metric_gate.persist_values", f, i) for f in ("series", "backend", "suite", "role"))
        for i in (0, 1)
    ]
    assert identities == [("a", "cuda", "default", "auto"), ("b", "rocm", "default", "shadow")]
    assert [_rendered(dag, "metric_gate.wait_for_record", "path", i) for i in (0, 1)] == ["/a", "/b"]
    assert _rendered(dag, "metric_gate.select_steps", "gates_file", 1) == "gates.yaml"


def test_expand_kwargs_over_an_upstream_task_keeps_the_fixed_settings():
    with _dag() as dag:

        @task
        def identities() -> list[dict]:
            return [{"series": "a", "path": "/a"}]

        metric_gate.partial(gates=[LOSS_GATE], poke_interval=5).expand_kwargs(identities())
    sensor = dag.get_task("metric_gate.wait_for_record")
    assert (sensor.poke_interval, sensor.deferrable) == (5, True)
    assert dag.get_task("metric_gate.select_steps").gates == [LOSS_GATE]
    assert dag.get_task("metric_gate.evaluate_gate").enforce is True
    assert "identities" in sensor.upstream_task_ids


@pytest.mark.parametrize("key, value", [("enforce", False), ("gates", []), ("poke_interval", 5), ("deferrable", False),
                                        ("timeout", 60)])
def test_a_fixed_setting_in_an_upstream_tasks_dicts_fails_at_run_time(key, value, monkeypatch):
    """The dicts of an upstream task are known only at run time: a fixed key there is bad input, not ignored."""
    with _dag() as dag:

        @task
        def identities() -> list[dict]:
            return []

        metric_gate.partial(gates_file="gates.yaml").expand_kwargs(identities())

    def ti(*dicts):
        return FakeTI(map_index=len(dicts) - 1, upstream={("identities", None): list(dicts)})

    ok = {"series": "a", "path": "/a"}
    bad = ti(ok, {"series": "b", "path": "/b", key: value})
    # In a task the running task's context is current: the error names the map index too.
    monkeypatch.setattr(task_groups, "get_current_context", lambda: {"ti": bad})
    for task_id, field in (("wait_for_record", "path"), ("persist_values", "series")):
        operator = dag.get_task(f"metric_gate.{task_id}")
        assert operator.render_template(getattr(operator, field), {"ti": ti(ok)}) in ("a", "/a")
        with pytest.raises(AirflowFailException,
                           match=rf"series 'b' \(map index 1\) names {key!r}.*give it to \.partial\(\)"):
            operator.render_template(getattr(operator, field), {"ti": bad})


@pytest.mark.parametrize("extra, why", [({"sute": "t"}, r"'sute', which is not an argument"),
                                        ({"suite": "t"}, r"'suite', which \.partial\(\) gives already")])
def test_an_upstream_dict_naming_no_argument_or_one_of_partial_fails_at_run_time(extra, why):
    with _dag() as dag:

        @task
        def identities() -> list[dict]:
            return []

        metric_gate.partial(gates_file="gates.yaml", suite="s").expand_kwargs(identities())
    operator = dag.get_task("metric_gate.persist_values")
    ti = FakeTI(map_index=0, upstream={("identities", None): [{"series": "a", "path": "/a", **extra}]})
    with pytest.raises(AirflowFailException, match=rf"the dict of series 'a' names {why}"):
        operator.render_template(operator.series, {"ti": ti})


def test_a_literal_dict_naming_no_argument_or_one_of_partial_is_refused_when_parsed():
    with _dag(), pytest.raises(TypeError, match=r"the dict of index 1 names 'sute', which is not an argument"):
        metric_gate.expand_kwargs([{"series": "a", "path": "/a"}, {"series": "b", "path": "/b", "sute": "t"}])
    with _dag(), pytest.raises(TypeError, match=r"index 0 names 'suite', which \.partial\(\) gives already"):
        metric_gate.partial(suite="s").expand_kwargs([{"series": "a", "path": "/a", "suite": "t"}])


def test_the_mapped_dag_serializes_with_the_completing_map():
    """The scheduler gets the DAG serialized: the map's callable is stored as its source."""
    from airflow.serialization.serialized_objects import DagSerialization

    with _dag() as dag:

        @task
        def identities() -> list[dict]:
            return [{"series": "a", "path": "/a"}]

        metric_gate.partial(gates_file="gates.yaml").expand_kwargs(identities())
    serialized = DagSerialization.to_dict(dag)
    assert "def complete(self, series" in str(serialized)


def test_expand_over_series_and_record():
    with _dag() as dag:
        metric_gate.partial(gates_file="gates.yaml", suite="s").expand(series=["a"], path=["/a"])
    assert _rendered(dag, "metric_gate.persist_values", "series", 0) == "a"
    assert dag.get_task("metric_gate.persist_values").suite == "s"


@pytest.mark.parametrize(
    "mapped",
    [
        lambda: metric_gate.partial(series="a", path="/a").expand(enforce=[True, False]),
        lambda: metric_gate.expand_kwargs([{"series": "a", "path": "/a", "poke_interval": 5}]),
    ],
    ids=["expand", "literal-expand_kwargs"],
)
@pytest.mark.filterwarnings("ignore:Partial task group .* was never mapped")
def test_a_setting_that_cannot_differ_per_series_must_go_to_partial(mapped):
    with _dag(), pytest.raises(TypeError, match=r"is the same for every series; give it to \.partial\(\)"):
        mapped()


def test_the_nightly_dag_and_its_hand_composed_twin_build_the_same_tasks():
    """examples/nightly_metric_gate_by_hand.py composes the packaged DAG's group by hand: same tasks."""
    grouped = _load(ROOT / "dags" / "nightly_metric_gate.py", "nightly_grouped_under_test")
    by_hand = _load(ROOT / "examples" / "nightly_metric_gate_by_hand.py", "nightly_by_hand_under_test")
    assert [f"metric_gate.{t}" for t in by_hand.task_ids] == grouped.task_ids
    assert dict(by_hand.params) == dict(grouped.params)
    assert (by_hand.schedule, by_hand.default_args) == (grouped.schedule, grouped.default_args)
    for name in STEPS:
        ours, theirs = grouped.get_task(f"metric_gate.{name}"), by_hand.get_task(name)
        assert type(ours) is type(theirs)
        assert {f"metric_gate.{t}" for t in theirs.upstream_task_ids} == ours.upstream_task_ids
        for field in (*ours.template_fields, "enforce", "deferrable", "poke_interval", "timeout", "gates"):
            mine, other = getattr(ours, field, None), getattr(theirs, field, None)
            if hasattr(mine, "operator"):  # an upstream's output: the same upstream task
                assert mine.operator.task_id == f"metric_gate.{other.operator.task_id}", (name, field)
            else:
                assert mine == other, (name, field)


def test_a_bad_local_gates_file_is_a_dag_import_error_when_the_task_group_is_built(tmp_path):
    from airflow_metric_gate.declarations import DeclarationError

    gates = tmp_path / "gates.yaml"
    gates.write_text("gates:\n  - metric_key: rollout/raw_reward\n    constraint: {rel_up: 0.1, down: 0.1}\n")
    dag = DAG("bad_gates", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC"))
    dag.fileloc = str(tmp_path / "dag.py")
    with pytest.raises(DeclarationError) as info, dag:
        metric_gate(series="rl", path="/data/{{ ds }}", gates_file="gates.yaml")  # relative to the DAG file
    assert str(info.value).startswith(f"{gates}:2: ") and "'down'" in str(info.value)


def test_the_shipped_dag_checks_its_default_gates_file_when_parsed(tmp_path):
    import importlib.util
    import shutil

    from airflow_metric_gate.declarations import DeclarationError

    dag_file = tmp_path / "nightly_metric_gate.py"
    shutil.copy(ROOT / "airflow_metric_gate" / "example_dags" / "nightly_metric_gate.py", dag_file)
    (tmp_path / "gates").mkdir()
    gates = tmp_path / "gates" / "nightly_metric_gate.yaml"
    gates.write_text("gates:\n  - metric_key: rollout/raw_reward\n    steps: [1, 1]\n")
    spec = importlib.util.spec_from_file_location("copied_nightly_metric_gate", dag_file)
    module = importlib.util.module_from_spec(spec)
    with pytest.raises(DeclarationError) as info:
        spec.loader.exec_module(module)
    assert str(info.value).startswith(f"{gates}:2: ")


def test_notifiers_approval_and_the_gated_asset_add_their_callbacks_and_tasks():
    from airflow_metric_gate.notifications.smtp import MetricGateEmailNotifier
    from airflow_metric_gate.operators.assets import gated_metrics_asset

    notifier = MetricGateEmailNotifier(to="oncall@example.com")
    asset = gated_metrics_asset("rl")
    with _dag() as dag:
        metric_gate(series="rl", path="/r", gates=[LOSS_GATE], notifiers=[notifier], approval=True, gated_asset=asset)
    evaluate = dag.get_task("metric_gate.evaluate_gate")
    assert evaluate.on_failure_callback == [notifier] and evaluate.on_success_callback == [notifier]
    approve = dag.get_task("metric_gate.approve_night")
    publish = dag.get_task("metric_gate.publish_gated_metrics")
    assert approve.upstream_task_ids == publish.upstream_task_ids == {"metric_gate.evaluate_gate"}
    assert (approve.trigger_rule, approve.evaluate_task_id) == ("all_done", "metric_gate.evaluate_gate")
    assert publish.outlets == [asset] and publish.trigger_rule == "all_success"
    with _dag("plain") as plain:
        metric_gate(series="rl", path="/r", gates=[LOSS_GATE])
    assert plain.task_ids == [f"metric_gate.{name}" for name in STEPS]  # nothing added by default
    assert not plain.get_task("metric_gate.evaluate_gate").on_failure_callback
