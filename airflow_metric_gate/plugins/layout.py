"""The layout every "Metric gate" UI page shares: the document and its stylesheet, links, numbers and steps.

No script is used (the Airflow UI shows external views in a sandboxed iframe), so the stylesheet's
hash is all the pages' Content-Security-Policy allows.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Mapping
from html import escape
from urllib.parse import urlencode

STYLE = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:16px;color:#1b1f24;background:#fff}
h1{font-size:20px;margin:0 0 8px}h2{font-size:16px;margin:20px 0 6px}h3{font-size:14px;margin:14px 0 4px}
a{color:#0b62c4}table{border-collapse:collapse;margin:6px 0}th,td{border-bottom:1px solid #e3e6ea;padding:4px 8px;
text-align:left;vertical-align:top}th{background:#f4f6f8;font-weight:600}.mg-muted{color:#5d6670}
.mg-summary{list-style:none;padding:0;margin:8px 0}.mg-summary li{border-left:4px solid #c62828;background:#fdf1f0;
padding:6px 10px;margin:4px 0}.mg-summary li.mg-error{border-color:#b26a00;background:#fff6e5}
.mg-verdict{display:inline-block;padding:2px 8px;border-radius:4px;font-weight:600}
.mg-verdict-ok{background:#e6f4ea;color:#1e7b34}.mg-verdict-bad{background:#fce8e6;color:#b3261e}
.mg-chart{max-width:100%;height:auto;background:#fff;border:1px solid #e3e6ea;margin:4px 0}
.mg-band{fill:#a5c8f0;fill-opacity:.45;stroke:none}.mg-band-key{fill:#a5c8f0;fill-opacity:.45}
.mg-ref{stroke:#1f5fa8;stroke-dasharray:5 3;stroke-width:1.2;fill:none}
.mg-axis{stroke:#5d6670}.mg-grid{stroke:#eef0f2}.mg-tick,.mg-legend{font-size:11px;fill:#3d454d}
.mg-line{fill:none;stroke:#9aa3ab;stroke-width:1}.mg-tonight-line{stroke:#222;stroke-width:1.3}
.mg-trusted{fill:#1f5fa8}.mg-pending{fill:#9aa3ab}.mg-untrusted{stroke:#c62828;stroke-width:2;fill:none}
.mg-shadow{fill:#fff;stroke:#7b4bb7;stroke-width:1.5}.mg-tonight{fill:#f57c00;stroke:#000;stroke-width:2}
.mg-step-pass{fill:#444}.mg-step-fail{fill:#c62828}
form.mg-inline{display:inline}input,select,button{font:inherit;padding:2px 6px}
.mg-note{background:#f4f6f8;padding:6px 10px;border-radius:4px}
.mg-flash{background:#e6f4ea;padding:6px 10px;border-radius:4px}
table.mg-grid td{padding:0;border:1px solid #fff}table.mg-grid td a{display:block;min-width:22px;height:18px}
.mg-o-pass{background:#7cc38c}.mg-o-inactive{background:#d5dade}.mg-o-fail{background:#d9534f}
.mg-o-error{background:#b26a00}.mg-o-shift{background:#8e44ad}.mg-o-drift,.mg-o-drift-continues{background:#f0ad4e}
.mg-o-blowup{background:#6d0f0f}.mg-o-pending,.mg-o-none{background:#f4f6f8}
.mg-night-pass{fill:#1e7b34}.mg-night-inactive{fill:#9aa3ab}.mg-night-fail,.mg-night-error{fill:#c62828}
.mg-night-shift{fill:#8e44ad}.mg-night-drift,.mg-night-drift-continues{fill:#f0ad4e}.mg-night-blowup{fill:#6d0f0f}
"""


#: The Content-Security-Policy source of the one inline stylesheet (no other style or script runs).
STYLE_HASH = "sha256-" + base64.b64encode(hashlib.sha256(STYLE.encode()).digest()).decode()


def page(title: str, body: str) -> str:
    """Wrap a page body in the document with the package's stylesheet.

    :param title: the document title.
    :param body: the body HTML.
    """
    return (
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
        f"<title>{escape(title)}</title><meta name=\"viewport\" content=\"width=device-width\">"
        f"<style>{STYLE}</style></head><body>{body}</body></html>"
    )


def _q(**params: object) -> str:
    return urlencode({k: v for k, v in params.items() if v is not None})


def series_link(series: str, backend: str, suite: str, **extra: object) -> str:
    """Return the relative link to a series page.

    :param series: the series name.
    :param backend: the backend.
    :param suite: the suite.
    :param extra: more query parameters (``None`` values are left out).
    """
    return "series?" + _q(series=series, backend=backend, suite=suite, **extra)


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:.6g}"


def _step(result: Mapping) -> str:
    if result.get("step") is None:
        return "-"
    if result["step"] == -1:
        return f"last@{result['at_step']}" if result.get("at_step") is not None else "last"
    return str(result["step"])



def message_page(title: str, text: str) -> str:
    """A page that only says something (no verdict, not a gate task).

    :param title: the heading.
    :param text: the sentence.
    """
    return page(title, f"<h1>{escape(title)}</h1><p class=\"mg-note\">{escape(text)}</p>")
