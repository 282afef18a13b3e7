"""Servers a test starts on loopback and stops itself: an SMTP server and an HTTP endpoint standing in
for a Slack Incoming Webhook.  Each records what it received."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from email import message_from_bytes, policy
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Mailbox:
    """What the SMTP server received: one parsed message per mail, with its envelope."""

    port: int
    mails: list[dict[str, Any]] = field(default_factory=list)


@contextmanager
def smtp_server() -> Iterator[Mailbox]:
    """An aiosmtpd server on 127.0.0.1 (no TLS, no login), stopped on exit."""
    from aiosmtpd.controller import Controller

    box = Mailbox(port=free_port())

    class Handler:
        async def handle_DATA(self, server, session, envelope):  # noqa: N802 - aiosmtpd's hook name
            message = message_from_bytes(envelope.content, policy=policy.default)
            body = message.get_body(preferencelist=("html", "plain"))
            box.mails.append({"from": envelope.mail_from, "to": list(envelope.rcpt_tos),
                              "subject": str(message["subject"]), "body": body.get_content() if body else ""})
            return "250 OK"

    controller = Controller(Handler(), hostname="127.0.0.1", port=box.port)
    controller.start()
    try:
        yield box
    finally:
        controller.stop()


@dataclass
class Webhook:
    """What the webhook endpoint received: the path and JSON body of each POST."""

    url: str
    posts: list[dict[str, Any]] = field(default_factory=list)


@contextmanager
def webhook_server() -> Iterator[Webhook]:
    """An HTTP server on 127.0.0.1 answering every POST ``200 ok``, as Slack's webhooks do; stopped on exit."""
    hook: Webhook

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 - http.server's method name
            length = int(self.headers.get("content-length") or 0)
            hook.posts.append({"path": self.path, "body": json.loads(self.rfile.read(length) or b"null")})
            self.send_response(200)
            self.send_header("content-type", "text/plain")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, format, *args):  # quiet
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    hook = Webhook(url=f"http://127.0.0.1:{server.server_address[1]}")
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield hook
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
