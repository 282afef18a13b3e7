"""The documentation builds with warnings as errors and covers every public name.

Every CLI option, verdict field, operator and sensor parameter, store column and defaults-table
entry is read from the code and looked up in ``docs/``, so adding one without documenting it fails
here.
"""

from __future__ import annotations

import argparse
import html
import importlib
import importlib.util
import inspect
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
EXAMPLES = ROOT / "scripts" / "sync_docs_examples.py"

OPERATORS = [
    ("airflow_metric_gate.sensors.training_output", "TrainingOutputSensor"),
    ("airflow_metric_gate.operators.ingest", "IngestRecordOperator"),
    ("airflow_metric_gate.operators.select", "SelectStepsOperator"),
    ("airflow_metric_gate.operators.persist", "PersistValuesOperator"),
    ("airflow_metric_gate.operators.evaluate", "EvaluateGateOperator"),
]


def _read(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def _pages() -> dict[str, str]:
    return {str(p.relative_to(DOCS)): _read(p) for p in sorted(DOCS.rglob("*.md"))}


def _sections(text: str) -> dict[str, str]:
    """Split a page on ``##`` headings: heading text -> body."""
    parts = re.split(r"^## (.+)$", text, flags=re.M)
    return {parts[i].strip(): parts[i + 1] for i in range(1, len(parts), 2)}


def _has_token(text: str, token: str) -> bool:
    return re.search(rf"(?<![\w-]){re.escape(token)}(?![\w-])", text) is not None


def _table_row_names(text: str) -> set[str]:
    """The code-formatted first cells of markdown table rows: ``| `name` | ...``."""
    return set(re.findall(r"^\|\s*`([^`]+)`", text, flags=re.M))


def _first_cells(text: str) -> str:
    """The first cells of every markdown table row, one per line (escaped ``\\|`` kept inside)."""
    return "\n".join(
        re.split(r"(?<!\\)\|", line)[1] for line in text.splitlines() if line.startswith("|")
    )


def _page_titled(title: str) -> str:
    for text in _pages().values():
        if re.search(rf"^# {re.escape(title)}\s*$", text, flags=re.M):
            return text
    raise AssertionError(f"no page in docs/ has the title {title!r}")


def _examples():
    """The docs example tool (``scripts/sync_docs_examples.py``), loaded as a module."""
    spec = importlib.util.spec_from_file_location("sync_docs_examples", EXAMPLES)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# -- the build ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    if importlib.util.find_spec("mkdocs") is None or importlib.util.find_spec("material") is None:
        pytest.skip("mkdocs / mkdocs-material not installed (pip install -e '.[docs]')")
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(ROOT / "mkdocs.yml"),
         "--site-dir", str(out)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, f"mkdocs build --strict failed:\n{proc.stdout}\n{proc.stderr}"
    return out


@pytest.mark.slow
def test_docs_build_strict(site: Path) -> None:
    for page in ("index.html", "getting-started/index.html", "runbook/index.html", "cli/index.html",
                 "verdict/index.html", "store-schema/index.html", "changelog/index.html",
                 "benchmarks/index.html", "deployment/index.html", "configuration/index.html"):
        assert (site / page).is_file(), page


def _code_text(html_text: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", html_text))


@pytest.mark.slow
def test_pages_show_their_example_code_as_plain_markdown(site: Path) -> None:
    """Every example block in a page is the code of its source file, written out in the page itself."""
    examples = _examples()
    blocks = 0
    for rel, text in _pages().items():
        assert "--8<--" not in text, f"{rel}: an include line shows no code on a repository browser"
        for match in examples.BLOCK.finditer(text):
            expected = examples.render(match["source"], match["section"])
            assert match["body"] == expected, (
                f"{rel}: the example from {match['source']}:{match['section']} differs from its source; "
                "run python scripts/sync_docs_examples.py"
            )
            page = "index.html" if rel == "index.md" else rel.removesuffix(".md") + "/index.html"
            first_line = next(line.strip() for line in expected.splitlines()[1:] if line.strip())
            assert first_line in _code_text(_read(site / page)), f"{rel}: {match['source']} did not render"
            blocks += 1
    assert blocks >= 10
    assert examples.main(["--check"]) == 0


def test_operator_pages_show_an_example_from_the_hand_composed_nightly_dag() -> None:
    """Each operator page shows its operator as the nightly DAG composed by hand uses it."""
    examples = _examples()
    source = "examples/nightly_metric_gate_by_hand.py"
    for _module, name in OPERATORS:
        found = [m for m in examples.BLOCK.finditer(_page_titled(name)) if m["source"] == source]
        assert found, f"the {name} page shows no example from {source}"
        assert any(name + "(" in m["body"] for m in found), f"the {name} page's example does not use {name}"


def test_the_task_group_page_shows_the_nightly_dag_and_the_mapped_example() -> None:
    examples = _examples()
    shown = {(m["source"], m["section"]) for m in examples.BLOCK.finditer(_page_titled("The metric_gate task group"))}
    assert ("airflow_metric_gate/example_dags/nightly_metric_gate.py", "pipeline") in shown
    assert ("examples/several_series_mapped.py", "complete") in shown  # a runnable file: imports, SERIES, GATES


def test_an_example_edited_in_a_page_is_caught() -> None:
    examples = _examples()
    page = _read(DOCS / "airflow" / "ingest-record-operator.md")
    edited = page.replace('task_id="ingest_record"', 'task_id="ingest"', 1)
    assert edited != page
    assert examples.sync(edited) == page  # the check sees the difference and restores the source's code
    with pytest.raises(examples.ExampleError, match="no section 'nope'"):
        examples.render("examples/nightly_metric_gate_by_hand.py", "nope")


# -- the command line --------------------------------------------------------------------------


def _walk(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _walk(sub, (*path, name))


def test_every_cli_option_is_documented_in_its_section() -> None:
    from airflow_metric_gate.cli import build_parser

    sections = _sections(_read(DOCS / "cli.md"))
    checked = 0
    for path, parser in _walk(build_parser()):
        has_sub = any(isinstance(a, argparse._SubParsersAction) for a in parser._actions)
        if path and has_sub:
            continue  # ``db`` only groups ``db upgrade``
        heading = "`" + " ".join(("metric-gate", *path)) + "`"
        assert heading in sections, f"docs/cli.md has no section '## {heading}'"
        body = _first_cells(sections[heading])
        for action in parser._actions:
            if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
                continue
            if action.option_strings:
                for option in action.option_strings:
                    assert _has_token(body, option), f"{heading}: option {option} is not documented"
                    checked += 1
            else:
                name = action.metavar or action.dest
                assert _has_token(body, name), f"{heading}: argument {name} is not documented"
            for choice in action.choices or ():
                assert _has_token(body, str(choice)), f"{heading}: choice {choice!r} is not documented"
    assert checked > 30
    assert _has_token(_read(DOCS / "cli.md"), "--help")


def test_the_command_list_names_every_command() -> None:
    from airflow_metric_gate.cli import build_parser

    listing = _read(DOCS / "cli.md").split("COMMAND:\n", 1)[1].split("```", 1)[0]
    [commands] = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    for name in commands.choices:
        assert re.search(rf"^  {re.escape(name)}\b", listing, flags=re.M), f"docs/cli.md: COMMAND list lacks {name}"


def test_exit_statuses_are_documented() -> None:
    from airflow_metric_gate import cli

    table = _sections(_read(DOCS / "cli.md"))["Exit status"]
    codes = {getattr(cli, n) for n in dir(cli) if n.startswith("EXIT_")}
    assert codes == {0, 1, 2, 3, 4}
    for code in codes:
        assert re.search(rf"^\| `{code}` \|", table, flags=re.M), f"exit status {code} is not documented"


def test_store_url_settings_are_documented() -> None:
    from airflow_metric_gate.store import DEFAULT_STORE_URL, STORE_URL_ENV

    text = _read(DOCS / "cli.md") + _read(DOCS / "configuration.md")
    assert STORE_URL_ENV in text
    assert DEFAULT_STORE_URL in text


# -- the verdict -------------------------------------------------------------------------------


def test_every_verdict_field_is_documented() -> None:
    from airflow_metric_gate.schemas.verdict import (
        CountsSchema,
        ResultSchema,
        SummarySchema,
        VerdictSchema,
        WorstSchema,
    )
    from airflow_metric_gate.verdict import VERDICT_SCHEMA

    page = _read(DOCS / "verdict.md")
    sections = _sections(page)
    top = _table_row_names(sections["Top-level fields"])
    result = _table_row_names(sections["Result fields"])
    for name in VerdictSchema().fields:
        assert name in top, f"verdict field {name!r} is not in the top-level fields table"
    for name in ResultSchema().fields:
        assert name in result, f"result field {name!r} is not in the result fields table"
    for name in CountsSchema().fields:
        assert f"`{name}`" in sections["Top-level fields"], f"counts key {name!r} is not documented"
    summary = sections["Summary fields"]
    for name in SummarySchema().fields:
        assert name in _table_row_names(summary), f"summary field {name!r} is not in the summary fields table"
    for name in WorstSchema().fields:
        assert f"`{name}`" in summary, f"summary worst field {name!r} is not documented"
    assert VERDICT_SCHEMA in page
    assert "metric-gate: <series> run <run_id>: TRUSTED|NOT-TRUSTED" in page


# -- the Airflow layer -------------------------------------------------------------------------


@pytest.mark.parametrize(("module", "name"), OPERATORS)
def test_every_operator_parameter_is_documented(module: str, name: str) -> None:
    cls = getattr(importlib.import_module(module), name)
    documented = _table_row_names(_sections(_page_titled(name))["Parameters"])
    params = [
        p.name
        for p in inspect.signature(cls.__init__).parameters.values()
        if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD) and p.name != "self"
    ]
    assert params
    missing = [p for p in params if p not in documented]
    assert not missing, f"{name}: parameters missing from its page's Parameters table: {missing}"
    for field in getattr(cls, "template_fields", ()):
        row = re.search(rf"^\| `{re.escape(field)}` \|.*$", _page_titled(name), flags=re.M)
        assert row and "| yes |" in row.group(0), f"{name}: {field} is templated but not documented so"


def test_connection_settings_are_documented() -> None:
    from airflow_metric_gate import get_provider_info

    conn_id = get_provider_info()["config"]["metric_gate"]["options"]["conn_id"]["default"]
    text = _read(DOCS / "configuration.md")
    assert f"`{conn_id}`" in text
    assert f"AIRFLOW_CONN_{conn_id.upper()}" in text
    assert "AIRFLOW__METRIC_GATE__CONN_ID" in text


# -- concepts and the store --------------------------------------------------------------------


def test_defaults_table_matches_gate_defaults() -> None:
    declarations = importlib.import_module("airflow_metric_gate.declarations")
    match = re.search(r"^### The defaults table$(.*?)^#", _read(DOCS / "concepts.md"), flags=re.M | re.S)
    assert match, "docs/concepts.md has no '### The defaults table' section"
    table = match.group(1)
    rows = {
        m.group(1): [c.strip() for c in m.group(2).split("|")]
        for m in re.finditer(r"^\| `([^`]+)` \|(.*)\|\s*$", table, flags=re.M)
    }
    assert set(rows) == set(declarations.GATE_DEFAULTS), "the documented defaults table lists other metrics"
    keys = ("rel_up", "abs_floor_up", "rel_down", "abs_floor_down")
    for metric, entry in declarations.GATE_DEFAULTS.items():
        steps, *values = rows[metric]
        assert steps.strip("`") == f'"{entry["steps"]}"', f"{metric}: steps"
        assert len(values) == len(keys), f"{metric}: the row needs one cell per constraint key"
        for key, cell in zip(keys, values, strict=True):
            if key in entry["constraint"]:
                assert float(cell) == entry["constraint"][key], f"{metric}: {key}"
            else:
                assert cell == "(omitted)", f"{metric}: {key} is not in the table entry"


def _schema_columns() -> dict[str, list[str]]:
    from airflow_metric_gate.store.schema import SCHEMA_VERSION, migration_statements

    tables: dict[str, list[str]] = {}
    for version in range(1, SCHEMA_VERSION + 1):
        for statement in migration_statements(version, "postgres"):
            match = re.match(r"\s*CREATE TABLE (?:IF NOT EXISTS )?(\w+) \((.*?)\)[\w\s(=)]*$", statement, flags=re.S)
            if not match:
                continue
            for line in match.group(2).splitlines():
                word = line.strip().split(" ", 1)[0]
                if word and word.upper() not in ("CONSTRAINT", "UNIQUE", "PRIMARY", "FOREIGN", "CHECK"):
                    tables.setdefault(match.group(1), []).append(word)
    return tables


def test_store_schema_is_documented() -> None:
    from airflow_metric_gate.store.schema import SCHEMA_VERSION, SCHEMA_VERSION_TABLE, migration_statements

    page = _read(DOCS / "store-schema.md")
    sections = _sections(page)
    tables = _schema_columns()
    assert {"runs", "metric_values", SCHEMA_VERSION_TABLE} <= set(tables)
    for table, columns in tables.items():
        heading = "Versioning" if table == SCHEMA_VERSION_TABLE else f"`{table}`"
        documented = _table_row_names(sections[heading])
        missing = [c for c in columns if c not in documented]
        assert not missing, f"store table {table}: columns missing from docs/store-schema.md: {missing}"
    statements = "\n".join(
        s for v in range(1, SCHEMA_VERSION + 1) for s in migration_statements(v, "postgres")
    )
    names = re.findall(r"(?:CREATE INDEX IF NOT EXISTS|CONSTRAINT) (\w+)", statements)
    assert names
    documented = _table_row_names(sections["Constraints and indexes"])
    assert not [n for n in names if n not in documented], "an index or constraint is not documented"
    assert "metric-gate db upgrade" in sections["Versioning"]


def test_benchmarks_page_says_how_to_run() -> None:
    assert "python benchmarks/run.py" in _read(DOCS / "benchmarks.md")


# -- plain Markdown: pages read the same on a repository browser and in the built site ------------

_LINK = re.compile(r"\[(?P<text>[^\]]*)\]\((?P<target>[^)\s]+)\)")


def _prose_lines(text: str):
    """(line number, line) of every line outside fenced code blocks."""
    fence = None
    for number, line in enumerate(text.splitlines(), 1):
        marker = re.match(r"\s*(```+|~~~+)", line)
        if marker:
            if fence is None:
                fence = marker.group(1)[0] * 3
            elif marker.group(1).startswith(fence):
                fence = None
            continue
        if fence is None:
            yield number, line


def _heading_text(raw: str) -> str:
    """What a heading reads once rendered: link text kept, code and emphasis marks dropped."""
    text = _LINK.sub(lambda m: m["text"], raw)
    text = text.replace("`", "")
    return re.sub(r"(\*\*|__|\*)(.+?)\1", r"\2", text).strip()


def _github_slug(text: str) -> str:
    """The anchor GitHub's renderer gives a heading (lower case, punctuation dropped, each space a dash)."""
    return re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")


def _mkdocs_slug(text: str) -> str:
    from markdown.extensions.toc import slugify

    return slugify(text, "-")


def _anchors(text: str, slug, duplicate: str) -> set[str]:
    """Every heading anchor of a page, with the renderer's suffix for repeated headings."""
    seen: dict[str, int] = {}
    anchors = set()
    for _number, line in _prose_lines(text):
        heading = re.match(r"#{1,6} (.+?)\s*#*\s*$", line)
        if not heading:
            continue
        base = slug(_heading_text(heading.group(1)))
        count = seen.get(base, 0)
        seen[base] = count + 1
        anchors.add(base if count == 0 else f"{base}{duplicate}{count}")
    return anchors


def test_pages_use_no_syntax_a_repository_browser_shows_raw() -> None:
    """No ``{#id}`` heading attribute and no ``!!!`` admonition: GitHub prints both as text."""
    found = []
    for rel, text in _pages().items():
        for number, line in _prose_lines(text):
            if re.match(r"#{1,6} ", line) and "{#" in line:
                found.append(f"docs/{rel}:{number}: heading with an {{#id}} attribute: {line.strip()}")
            if re.match(r"\s*(!!!|\?\?\?)", line):
                found.append(f"docs/{rel}:{number}: admonition block: {line.strip()}")
    assert not found, "\n".join(found)


def test_every_anchor_link_lands_on_a_heading_under_both_renderers() -> None:
    """A ``page.md#anchor`` link names a heading's anchor as GitHub and MkDocs both derive it from its text."""
    pages = {DOCS / rel: text for rel, text in _pages().items()}
    pages[ROOT / "README.md"] = _read(ROOT / "README.md")
    renderers = {"GitHub": (_github_slug, "-"), "MkDocs": (_mkdocs_slug, "_")}
    anchors = {
        (path, name): _anchors(text, slug, duplicate)
        for path, text in pages.items()
        for name, (slug, duplicate) in renderers.items()
    }
    broken = []
    checked = 0
    for path, text in pages.items():
        lines = dict(_prose_lines(text))
        prose = "\n".join(lines.get(n, "") for n in range(1, len(text.splitlines()) + 1))
        for link in _LINK.finditer(prose):  # a link's text may wrap onto the next line
            target, _, anchor = link["target"].partition("#")
            if not anchor or "://" in target or not (target == "" or target.endswith(".md")):
                continue
            page = (path.parent / target).resolve() if target else path
            number = prose.count("\n", 0, link.start()) + 1
            checked += 1
            for name in renderers:
                if anchor not in anchors.get((page, name), set()):
                    broken.append(f"{path.relative_to(ROOT)}:{number}: #{anchor} is no heading of "
                                  f"{page.relative_to(ROOT)} on {name}")
    assert checked > 100
    assert not broken, "\n".join(broken)
