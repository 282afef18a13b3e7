"""examples/notified_nightly.py end to end: a regressed night reaches on-call by email and by Slack.

The test starts a real SMTP server (aiosmtpd) and an HTTP endpoint standing in for the Slack
webhook, both on loopback, points the example's two connections at them, and runs three nights with
``dag.test()``: the two good nights send nothing, the regressed night's failure callbacks send the
verdict's summary with the link to the task instance's Metric gate tab.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from _gate_data import write_record
from _loopback_servers import smtp_server, webhook_server

pytestmark = pytest.mark.airflow_db

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "notified_nightly.py"
DAG_ID = "notified_nightly_gate"
WARN_DAG_ID = "notified_nightly_warn_gate"
NIGHTS = ("2026-11-01", "2026-11-02", "2026-11-03")
TOKEN = "T0000/B0000/not-a-real-secret-4242"


def _night(root: Path, night: str, reward: float) -> None:
    write_record(root / night, {"part-0.jsonl": [
        {"metric": "rollout/raw_reward", "series": [[0, reward], [1, reward]]},
        {"metric": "train/grad_norm", "series": [[0, 1.0], [1, 1.0]]},
    ]})


def _connections(tmp_path, mailbox, webhook) -> dict[str, str]:
    """The store, SMTP and Slack connections of the notified DAG, pointing at the loopback servers."""
    return {
        "AIRFLOW_CONN_METRIC_GATE_DB": f"sqlite:///{tmp_path / 'metric_gate.db'}",
        "AIRFLOW_CONN_METRIC_GATE_SMTP": json.dumps({
            "conn_type": "smtp", "host": "127.0.0.1", "port": mailbox.port,
            "extra": {"disable_ssl": True, "disable_tls": True}}),
        "AIRFLOW_CONN_METRIC_GATE_SLACK": json.dumps({
            "conn_type": "slackwebhook", "host": f"{webhook.url}/services", "password": TOKEN}),
        "AIRFLOW__API__BASE_URL": "http://airflow.example:8080",
    }


def test_a_regressed_night_is_told_by_email_and_slack_and_good_nights_are_quiet(airflow_env, tmp_path):
    root = tmp_path / "records"
    for night, reward in zip(NIGHTS, (0.8, 0.8, 0.4)):
        _night(root, night, reward)
    dag_file = airflow_env.scratch_dags / EXAMPLE.name
    shutil.copy(EXAMPLE, dag_file)
    with smtp_server() as mailbox, webhook_server() as webhook:
        env = _connections(tmp_path, mailbox, webhook)
        results = airflow_env.dag_tests(
            [{"dag_id": DAG_ID, "dag_file": dag_file, "logical_date": f"{night}T00:00:00+00:00",
              "conf": {"record_root": str(root), "role": "baseline"}} for night in NIGHTS],
            env=env, timeout=900,
        )
        good, regressed = results[:2], results[2]
        assert [r.state for r in good] == ["success", "success"], good[-1].output[-6000:]
        assert regressed.state == "failed", regressed.output[-6000:]
        assert regressed.task_state("metric_gate.evaluate_gate") == "failed"
        mails, posts = list(mailbox.mails), list(webhook.posts)

    link = (f"http://airflow.example:8080/dags/{DAG_ID}/runs/{regressed.run_id.replace(':', '%3A').replace('+', '%2B')}"
            "/tasks/metric_gate.evaluate_gate/plugin/metric-gate-task")
    verdict = regressed.xcom["metric_gate.evaluate_gate"]
    assert verdict["trusted"] is False and verdict["blocking"] == 3  # two steps and the night they fail

    # one email, only for the regressed night: the summary, counts, who must act, the link
    assert len(mails) == 1, mails
    (mail,) = mails
    assert mail["to"] == ["rl-oncall@example.com"] and mail["from"] == "metric-gate@example.com"
    assert mail["subject"] == "metric-gate BLOCKED: rl-7b (cuda, nightly-8xh100) night 2026-11-03"
    assert 'REGRESSED rollout/raw_reward (steps &quot;all&quot;): 2 of 2 steps FAIL' in mail["body"]
    # calibrated: each declaration's night decision is a result too (its steps' results beside it)
    results = sum(verdict["counts"].values())
    assert verdict["counts"]["FAIL"] == 3 and verdict["counts"]["ERROR"] == 0, verdict["counts"]
    counts = f"metric-gate: rl-7b run {verdict['run_id']}: NOT-TRUSTED ({results} results, 3 fail, 0 error), 3 blocking"
    assert counts in mail["body"]
    assert "Who must act: @rl-oncall" in mail["body"]
    assert f"metric-gate mark-untrusted --run-id {verdict['run_id']}" in mail["body"]
    assert f'href="{link}"' in mail["body"]

    # one Slack post to the webhook's path: the same lines, a button to the tab; the token is only in the path
    assert len(posts) == 1, posts
    (post,) = posts
    assert post["path"] == f"/services/{TOKEN}"
    body = post["body"]
    assert body["text"].startswith("metric-gate BLOCKED: rl-7b (cuda, nightly-8xh100) night 2026-11-03")
    assert 'REGRESSED rollout/raw_reward (steps "all"): 2 of 2 steps FAIL' in body["text"]
    assert "vs baseline 0.8 (change -50%" in body["text"]
    assert body["blocks"][-1]["elements"][0]["url"] == link
    assert TOKEN not in json.dumps(body)
    assert TOKEN not in regressed.output


def test_a_night_that_passes_with_a_warn_failure_is_told_as_a_warning(airflow_env, tmp_path):
    """``severity: warn`` on the reward: its -50 % night fails nothing that blocks, so the task succeeds,
    and the task group's on-success callbacks deliver the warning with the summary to both endpoints."""
    root = tmp_path / "records"
    for night, reward in zip(NIGHTS, (0.8, 0.8, 0.4)):
        _night(root, night, reward)
    source = EXAMPLE.read_text()
    gated = '"constraint": {"rel_up": 0.2, "rel_down": 0.2}}'
    assert gated in source
    assert f'dag_id="{DAG_ID}"' in source
    dag_file = airflow_env.scratch_dags / "notified_nightly_warn.py"  # its own DAG: the session's runs never mix
    dag_file.write_text(source.replace(gated, gated[:-1] + ', "severity": "warn"}')
                        .replace(f'dag_id="{DAG_ID}"', f'dag_id="{WARN_DAG_ID}"'))
    with smtp_server() as mailbox, webhook_server() as webhook:
        env = _connections(tmp_path, mailbox, webhook)
        results = airflow_env.dag_tests(
            [{"dag_id": WARN_DAG_ID, "dag_file": dag_file, "logical_date": f"{night}T00:00:00+00:00",
              "conf": {"record_root": str(root), "role": "baseline"}} for night in NIGHTS],
            env=env, timeout=900,
        )
        assert [r.state for r in results] == ["success"] * 3, results[-1].output[-6000:]
        mails, posts = list(mailbox.mails), list(webhook.posts)

    warned = results[2]
    verdict = warned.xcom["metric_gate.evaluate_gate"]
    assert verdict["trusted"] is False and not verdict.get("blocking")
    assert len(mails) == 1 and len(posts) == 1, (mails, posts)  # the two quiet nights sent nothing
    (mail,) = mails
    assert mail["subject"] == "metric-gate WARNING: rl-7b (cuda, nightly-8xh100) night 2026-11-03"
    assert "rollout/raw_reward" in mail["body"] and "(change -50%" in mail["body"]  # the summary, by how much
    assert verdict["counts"]["FAIL"] == 3, verdict["counts"]
    assert f"({sum(verdict['counts'].values())} results, 3 fail, 0 error)" in mail["body"]
    assert "blocking" not in mail["body"]  # nothing blocks: a warning, not a failure
    run = warned.run_id.replace(":", "%3A").replace("+", "%2B")
    link = f"http://airflow.example:8080/dags/{WARN_DAG_ID}/runs/{run}/tasks/metric_gate.evaluate_gate/plugin/metric-gate-task"
    assert f'href="{link}"' in mail["body"]
    body = posts[0]["body"]
    assert body["text"].startswith("metric-gate WARNING: rl-7b (cuda, nightly-8xh100) night 2026-11-03")
    assert "(change -50%" in body["text"] and body["blocks"][-1]["elements"][0]["url"] == link
    assert TOKEN not in json.dumps(body) and TOKEN not in warned.output
