"""The summary every replay report ends with, whichever way its nights were judged."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

__all__ = ["replay_summary"]


def replay_summary(nights: Sequence[Mapping], judged: Sequence[Mapping], replayable: int,
                   counts: Mapping[str, int]) -> dict:
    """Return a replay report's ``summary``: what would fail, against what is stored, and what changed.

    :param nights: every night of the report.
    :param judged: the nights that were judged (``replayed_status`` not ``None``).
    :param replayable: how many declarations could be replayed.
    :param counts: results per status over every judged night.
    """
    return {
        "nights": len(nights),
        "replayable_declarations": replayable,
        "would_fail": sum(n["replayed_status"] != "trusted" for n in judged),
        "stored_untrusted": sum(n["stored_status"] == "untrusted" for n in nights),
        "newly_failing": [n["run_id"] for n in judged
                          if n["stored_status"] == "trusted" and n["replayed_status"] != "trusted"],
        "no_longer_failing": [n["run_id"] for n in judged
                              if n["stored_status"] == "untrusted" and n["replayed_status"] == "trusted"],
        "counts": {s: c for s, c in counts.items() if c},
    }
