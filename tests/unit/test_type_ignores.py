"""Every ``# type: ignore`` in the package names its error codes and says why the checker is wrong there."""

from __future__ import annotations

import re
import tokenize
from pathlib import Path

import airflow_metric_gate

PACKAGE = Path(airflow_metric_gate.__file__).parent
# ``# type: ignore[code, ...]``, then a comment of its own: the reason
_EXPLAINED = re.compile(r"#\s*type:\s*ignore\[[a-z0-9-]+(,\s*[a-z0-9-]+)*\]\s+#\s*\S")


def _ignores() -> list[tuple[str, int, str]]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        with path.open("rb") as fh:
            for token in tokenize.tokenize(fh.readline):
                if token.type == tokenize.COMMENT and re.search(r"type:\s*ignore", token.string):
                    found.append((str(path.relative_to(PACKAGE)), token.start[0], token.string))
    return found


def test_there_are_ignores_to_check() -> None:
    assert _ignores(), "no `# type: ignore` found: the scan is broken (or every one was resolved: drop this test)"


def test_every_type_ignore_names_its_codes_and_a_reason() -> None:
    bare = [f"{path}:{line}: {text}" for path, line, text in _ignores() if not _EXPLAINED.search(text)]
    assert not bare, "write `# type: ignore[code]  # why`:\n" + "\n".join(bare)


def test_the_scan_tells_a_bare_ignore_from_an_explained_one() -> None:
    assert _EXPLAINED.search("# type: ignore[arg-type]  # a FAIL has one")
    assert _EXPLAINED.search("# type: ignore[type-var,operator]  # no None")
    assert not _EXPLAINED.search("# type: ignore[arg-type]")
    assert not _EXPLAINED.search("# type: ignore  # no code")
