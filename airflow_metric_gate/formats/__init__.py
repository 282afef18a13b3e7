"""Readers of the logs trainers already write: TensorBoard event files, CSV logs, MLflow runs.

Each reader returns, per metric, the steps and values it found, every point exactly as logged;
:func:`airflow_metric_gate.records.read_record` merges them into a
:class:`~airflow_metric_gate.records.Record` by the rule of SPEC section 2.  The TensorBoard and
MLflow readers import their optional libraries (extras ``tensorboard`` and ``mlflow``) only when
they are used.
"""

from __future__ import annotations

#: One metric's points read from one file: its steps (``None`` for a step that is not an
#: int >= 0), its values, the points whose step was not an int >= 0 as
#: ``(step as written, value, position)``, and the points whose value is not a number as
#: ``(step, value, position)``; the position is a 1-based line or a phrase such as
#: ``"event record 3"``.
FilePoints = tuple[list, list, list, list]
