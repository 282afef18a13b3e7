"""Nights written the way trainers write them: TensorBoard event files, Lightning-style CSV logs, MLflow runs."""

from __future__ import annotations

import csv
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

#: A gates file for the nights below: the reward at every step within 20 %, the gradient norm by its defaults.
GATES_YAML = """\
gates:
  - metric_key: rollout/raw_reward
    steps: all
    constraint: {rel_up: 0.2, rel_down: 0.2}
  - metric_key: train/grad_norm
"""

STEPS = range(4)


def night_points(reward: float, grad: float = 1.0) -> dict[str, list[tuple[int, float]]]:
    """The points of one night: the reward rising by 0.01 a step, a constant gradient norm."""
    return {
        "rollout/raw_reward": [(s, reward + 0.01 * s) for s in STEPS],
        "train/grad_norm": [(s, grad) for s in STEPS],
    }


def write_tensorboard_night(folder: Path, points: dict[str, list[tuple[int, float]]], *, marker: bool = True) -> Path:
    """Write a night's points with tensorboardX's SummaryWriter into ``folder``; add ``_SUCCESS``."""
    from tensorboardX import SummaryWriter

    writer = SummaryWriter(str(folder))
    for metric, series in points.items():
        for step, value in series:
            writer.add_scalar(metric, value, step)
    writer.close()
    if marker:
        (folder / "_SUCCESS").touch()
    return folder


def write_lightning_csv(path: Path, points: dict[str, list[tuple[int, float]]], *, epoch_every: int = 2) -> Path:
    """Write ``metrics.csv`` as Lightning's CSVLogger lays it out.

    One row per (step, logging call): each metric on a row of its own, other cells empty, the
    ``epoch`` and ``step`` columns last, as the logger appends them to each row's metrics.
    """
    keys = [*points, "epoch", "step"]
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=keys)
        writer.writeheader()
        rows = sorted((step, metric, value) for metric, series in points.items() for step, value in series)
        for step, metric, value in rows:
            writer.writerow({metric: repr(value), "epoch": step // epoch_every, "step": step})
    return path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class MlflowServer:
    """A real ``mlflow server`` on loopback with a SQLite backend, for one test session."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.port = free_port()
        self.uri = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen | None = None

    def start(self) -> MlflowServer:
        mlflow = shutil.which("mlflow", path=os.path.dirname(sys.executable)) or shutil.which("mlflow")
        command = [mlflow, "server", "--host", "127.0.0.1", "--port", str(self.port), "--workers", "1",
                   "--backend-store-uri", f"sqlite:///{self.folder / 'mlflow.db'}",
                   "--default-artifact-root", str(self.folder / "artifacts")]
        self.log = (self.folder / "server.log").open("wb")
        self.process = subprocess.Popen(command, stdout=self.log, stderr=subprocess.STDOUT, cwd=self.folder)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"mlflow server exited: {(self.folder / 'server.log').read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"{self.uri}/health", timeout=2) as response:
                    if response.status == 200:
                        return self
            except OSError:
                time.sleep(0.5)
        self.stop()
        raise RuntimeError("mlflow server did not answer within 120 s")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log.close()

    def client(self):
        from mlflow.tracking import MlflowClient

        return MlflowClient(tracking_uri=self.uri)


def log_mlflow_night(client, experiment: str, points: dict[str, list[tuple[int, float]]], *,
                     tags: dict[str, str] | None = None, status: str | None = "FINISHED") -> str:
    """Log a night's points to a new run of ``experiment`` through MLflow's client; return the run id.

    :param status: the status the run ends with; ``None`` leaves it RUNNING.
    """
    from mlflow.entities import Metric

    found = client.get_experiment_by_name(experiment)
    experiment_id = found.experiment_id if found is not None else client.create_experiment(experiment)
    run = client.create_run(experiment_id, tags=tags or {})
    now = int(time.time() * 1000)
    metrics = [Metric(key, value, now + step, step) for key, series in points.items() for step, value in series]
    for start in range(0, len(metrics), 1000):
        client.log_batch(run.info.run_id, metrics=metrics[start:start + 1000])
    if status is not None:
        client.set_terminated(run.info.run_id, status=status)
    return run.info.run_id
