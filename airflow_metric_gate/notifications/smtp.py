"""The email variant: the notice sent over Airflow's SMTP provider (extra ``smtp``)."""

from __future__ import annotations

from collections.abc import Sequence
from html import escape
from typing import TYPE_CHECKING, Any

from airflow_metric_gate.notification import Notice
from airflow_metric_gate.notifications.base import MetricGateNotifier

if TYPE_CHECKING:
    from airflow.sdk import Context


def notice_html(notice: Notice) -> str:
    """Return the notice as the body of an email (every value escaped, the link clickable).

    :param notice: what to say.
    """
    items = "".join(f"<li>{escape(line)}</li>" for line in notice.lines if not line.startswith("Metric gate tab: "))
    link = (f"<p><a href=\"{escape(notice.link, quote=True)}\">Open the Metric gate tab</a> "
            f"({escape(notice.link)})</p>" if notice.link else "")
    return f"<h3>{escape(notice.subject)}</h3><ul>{items}</ul>{link}"


class MetricGateEmailNotifier(MetricGateNotifier):
    """Email the night's notice through an SMTP connection (``apache-airflow-providers-smtp``).

    The subject is the notice's subject; the body lists its lines and links to the Metric gate
    tab.  The connection holds the server, its login and TLS options, and may hold the sender
    (``from_email`` in its extra).

    :param to: the recipients (templated).
    :param smtp_conn_id: the SMTP connection (default ``smtp_default``).
    :param from_email: the sender; default the connection's ``from_email``.
    :param cc: carbon-copy recipients.
    :param kwargs: passed to :class:`~airflow_metric_gate.notifications.base.MetricGateNotifier`
        (``on_call``, ``evaluate_task_id``, ``base_url``).
    """

    template_fields: Sequence[str] = ("on_call", "to", "from_email")

    def __init__(
        self,
        *,
        to: str | Sequence[str],
        smtp_conn_id: str = "smtp_default",
        from_email: str | None = None,
        cc: str | Sequence[str] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.to = to
        self.smtp_conn_id = smtp_conn_id
        self.from_email = from_email
        self.cc = cc

    def send(self, notice: Notice, context: Context) -> None:
        """Send the email.

        :param notice: what to say.
        :param context: the task context.
        """
        try:
            from airflow.providers.smtp.hooks.smtp import SmtpHook
        except ImportError as err:  # the extra is missing
            raise RuntimeError(
                "MetricGateEmailNotifier needs the SMTP provider: pip install 'airflow-metric-gate[smtp]'"
            ) from err
        with SmtpHook(smtp_conn_id=self.smtp_conn_id) as hook:
            hook.send_email_smtp(to=self.to, subject=notice.subject, html_content=notice_html(notice),
                                 from_email=self.from_email, cc=self.cc)
        self.log.info("metric-gate: notice emailed: %s", notice.subject)


__all__ = ["MetricGateEmailNotifier", "notice_html"]
