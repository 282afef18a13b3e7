"""The Slack variant: the notice posted to an Incoming Webhook over Airflow's Slack provider (extra ``slack``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from airflow_metric_gate.notification import Notice
from airflow_metric_gate.notifications.base import MetricGateNotifier

if TYPE_CHECKING:
    from airflow.sdk import Context

#: Slack refuses a text block over 3000 characters.
SLACK_TEXT_LIMIT = 3000


def slack_escape(text: str) -> str:
    """Escape the three characters Slack's mrkdwn gives a meaning (``&``, ``<``, ``>``).

    :param text: plain text.
    """
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def notice_message(notice: Notice) -> dict[str, Any]:
    """Return the webhook body of a notice: the plain text (the fallback) and Block Kit blocks.

    :param notice: what to say.
    """
    body = "\n".join(slack_escape(line) for line in notice.lines if not line.startswith("Metric gate tab: "))
    if len(body) > SLACK_TEXT_LIMIT:
        body = body[: SLACK_TEXT_LIMIT - 30].rsplit("\n", 1)[0] + "\n... (see the Metric gate tab)"
    blocks: list[dict[str, Any]] = [
        {"type": "header", "text": {"type": "plain_text", "text": notice.subject[:150]}},
        {"type": "section", "text": {"type": "mrkdwn", "text": body or "-"}},
    ]
    if notice.link:
        blocks.append({"type": "actions", "elements": [
            {"type": "button", "text": {"type": "plain_text", "text": "Open the Metric gate tab"},
             "url": notice.link}]})
    return {"text": notice.text, "blocks": blocks}


class MetricGateSlackNotifier(MetricGateNotifier):
    """Post the night's notice to a Slack channel through an Incoming Webhook connection.

    Uses ``apache-airflow-providers-slack``'s ``SlackWebhookHook``: the connection (type
    ``slackwebhook``) holds the webhook token in its password, so no token appears in a DAG file,
    a log line or the message.

    :param slack_webhook_conn_id: the Slack Incoming Webhook connection (default ``slack_default``).
    :param timeout: seconds to wait for Slack; default the connection's.
    :param kwargs: passed to :class:`~airflow_metric_gate.notifications.base.MetricGateNotifier`
        (``on_call``, ``evaluate_task_id``, ``base_url``).
    """

    template_fields: Sequence[str] = ("on_call", "slack_webhook_conn_id")

    def __init__(self, *, slack_webhook_conn_id: str = "slack_default", timeout: int | None = None,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.slack_webhook_conn_id = slack_webhook_conn_id
        self.timeout = timeout

    def send(self, notice: Notice, context: Context) -> None:
        """Post the message.

        :param notice: what to say.
        :param context: the task context.
        """
        try:
            from airflow.providers.slack.hooks.slack_webhook import SlackWebhookHook
        except ImportError as err:  # the extra is missing
            raise RuntimeError(
                "MetricGateSlackNotifier needs the Slack provider: pip install 'airflow-metric-gate[slack]'"
            ) from err
        hook = SlackWebhookHook(slack_webhook_conn_id=self.slack_webhook_conn_id, timeout=self.timeout)
        hook.send_dict(notice_message(notice))
        self.log.info("metric-gate: notice posted to Slack: %s", notice.subject)


__all__ = ["MetricGateSlackNotifier", "notice_message", "slack_escape"]
