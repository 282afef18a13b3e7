"""Notifiers that tell on-call about a night: the verdict's summary and a link to its Metric gate tab.

:class:`~airflow_metric_gate.notifications.base.MetricGateNotifier` builds the notice (Airflow's
``BaseNotifier``); :class:`~airflow_metric_gate.notifications.slack.MetricGateSlackNotifier` sends it
over the Slack provider (extra ``slack``) and
:class:`~airflow_metric_gate.notifications.smtp.MetricGateEmailNotifier` over the SMTP provider
(extra ``smtp``).  Give them to the ``metric_gate`` task group's ``notifiers``, or to an evaluate
task's ``on_failure_callback`` and ``on_success_callback``.
"""
