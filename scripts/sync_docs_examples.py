"""Copy example code from the repository's tested files into the docs pages, as plain Markdown.

A page asks for an example with a pair of HTML comments (invisible once rendered)::

    <!-- example: dags/nightly_metric_gate.py:ingest -->
    ```python
    ...the code, written here by this script...
    ```
    <!-- /example -->

``FILE`` is relative to the repository root; ``:SECTION`` is optional and names the lines between
``# [START SECTION]`` and ``# [END SECTION]`` in that file (dedented, with nested markers left
out); without it the whole file is shown.  The code sits in the page itself, so it reads on a
repository browser or in an editor, and it comes from files the tests run.

    python scripts/sync_docs_examples.py           # rewrite the blocks that differ
    python scripts/sync_docs_examples.py --check   # list them and exit 1 (the test suite does this)
"""

from __future__ import annotations

import argparse
import re
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"

BLOCK = re.compile(
    r"^<!-- example: (?P<source>[^\s:]+)(?::(?P<section>[\w-]+))? -->\n"
    r"(?P<body>.*?)"
    r"^<!-- /example -->$",
    flags=re.M | re.S,
)
MARKER = re.compile(r"^\s*# \[(?:START|END) [\w-]+\]\s*$")
LANGUAGES = {".py": "python", ".yaml": "yaml", ".yml": "yaml", ".json": "json", ".sh": "bash"}


class ExampleError(Exception):
    """A page asks for a file or section that does not exist."""


def section(source: str, name: str | None) -> str:
    """Return a file's section (or the whole file), dedented, without section markers.

    :param source: the file, relative to the repository root.
    :param name: the section name, or ``None`` for the whole file.
    """
    path = ROOT / source
    if not path.is_file():
        raise ExampleError(f"{source}: no such file")
    text = path.read_text(encoding="utf-8")
    if name is not None:
        match = re.search(
            rf"^[ \t]*# \[START {re.escape(name)}\][ \t]*\n(.*?)^[ \t]*# \[END {re.escape(name)}\]",
            text,
            flags=re.M | re.S,
        )
        if not match:
            raise ExampleError(f"{source}: no section {name!r} (# [START {name}] ... # [END {name}])")
        text = match.group(1)
    lines = [line for line in text.splitlines() if not MARKER.match(line)]
    return textwrap.dedent("\n".join(lines)).strip("\n") + "\n"


def render(source: str, name: str | None) -> str:
    """Return the fenced code block a page shows for one example.

    :param source: the file, relative to the repository root.
    :param name: the section name, or ``None`` for the whole file.
    """
    code = section(source, name)
    fence = "````" if "```" in code else "```"
    return f"{fence}{LANGUAGES.get(Path(source).suffix, 'text')}\n{code}{fence}\n"


def sync(page: str) -> str:
    """Return a page's text with every example block rewritten from its source.

    :param page: the page's Markdown.
    """

    def replace(match: re.Match[str]) -> str:
        opening = match.group(0).split("\n", 1)[0]
        return f"{opening}\n{render(match['source'], match['section'])}<!-- /example -->"

    return BLOCK.sub(replace, page)


def stale_pages() -> list[Path]:
    """Return the docs pages whose example blocks differ from their sources."""
    return [p for p in sorted(DOCS.rglob("*.md")) if sync(p.read_text(encoding="utf-8")) != p.read_text("utf-8")]


def main(argv: list[str] | None = None) -> int:
    """Rewrite (or with ``--check`` list) the pages whose examples are out of date.

    :param argv: command-line arguments.
    """
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if a page is out of date")
    args = parser.parse_args(argv)
    try:
        stale = stale_pages()
    except ExampleError as exc:
        print(f"sync_docs_examples: {exc}", file=sys.stderr)
        return 2
    for path in stale:
        if args.check:
            print(f"{path.relative_to(ROOT)}: example code differs from its source", file=sys.stderr)
        else:
            path.write_text(sync(path.read_text(encoding="utf-8")), encoding="utf-8")
            print(f"{path.relative_to(ROOT)}: examples updated")
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
