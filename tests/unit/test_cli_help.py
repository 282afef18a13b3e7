"""``metric-gate <command> --help``: every command describes itself and every option says its default."""

from __future__ import annotations

import argparse
import re

import pytest

from airflow_metric_gate.cli import build_parser, main


def _commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield (*path, name), sub
                yield from _commands(sub, (*path, name))


def _option_help(page: str, option: str) -> str:
    """The help text of one option on a ``--help`` page, unwrapped onto one line."""
    match = re.search(rf"^  {re.escape(option)}\b.*?(?=^  -|^  [A-Z]|^\S|\Z)", page, flags=re.M | re.S)
    assert match, f"{option} is not on the page"
    return " ".join(match.group(0).split())


COMMANDS = list(_commands(build_parser()))


def test_there_are_commands_to_check() -> None:
    assert {("run",), ("history",), ("db",), ("db", "upgrade"), ("demo",)} <= {path for path, _ in COMMANDS}


@pytest.mark.parametrize(("path", "parser"), COMMANDS, ids=[" ".join(p) for p, _ in COMMANDS])
def test_every_command_help_has_a_description_and_the_defaults(path, parser) -> None:
    page = parser.format_help()
    usage, _, rest = page.partition("\n\n")
    description = rest.split("\n\n", 1)[0]
    assert not description.startswith(("positional arguments", "options")), f"{' '.join(path)} --help: no description"
    assert description.strip().endswith("."), description
    for action in parser._actions:
        if not action.option_strings or isinstance(action, argparse._HelpAction):
            continue
        option = action.option_strings[0]
        text = _option_help(page, option)
        assert len(text) > len(option) + 5, f"{' '.join(path)}: {option} has no help text"
        if action.default not in (None, False):
            assert "default" in text, f"{' '.join(path)}: {option} does not say its default {action.default!r}"


def test_run_help_says_series_defaults_to_default(capsys) -> None:
    assert main(["run", "--help"]) == 0
    page = capsys.readouterr().out
    assert page.split("\n\n")[1].startswith("Ingest a record, select, store and evaluate it.")
    assert "(default: default)" in _option_help(page, "--series")
    assert "(default: baseline)" in _option_help(page, "--role")
    assert "(default: series)" in _option_help(page, "--format")
