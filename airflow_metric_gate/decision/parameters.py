"""The calibrated policy's parameters: false-alarm levels, minimum histories, and the limits of its tests.

:mod:`~airflow_metric_gate.decision.calibrated` re-exports the public ones; docs/concepts.md explains them.
"""

from __future__ import annotations

#: The false-alarm rate of one declaration's night test on its regression side (both sides
#: together for ``direction: both``).
FALSE_ALARM = 0.00025

#: The false-alarm rate of each sustained-shift test (2 and 3 nights in a row, see :data:`SUSTAINED_NIGHTS`).
SUSTAINED_FALSE_ALARM = 0.0001

#: The false-alarm rate of the drift test.
DRIFT_FALSE_ALARM = 0.0001

#: The false-alarm rate of the within-night test (all its split points together, see :data:`SHAPE_SPLITS`).
SHAPE_FALSE_ALARM = 0.00005

#: Where the within-night test splits a night's judged steps (fractions of them): the later part is
#: compared with the earlier part.
SHAPE_SPLITS = (0.25, 0.5, 0.75)

#: Judged steps each part of a split needs.
SHAPE_PART_MIN = 5

#: The sustained-shift test adds up the normalised ``z`` of this many nights in a row, tonight's included.
SUSTAINED_NIGHTS = (2, 3)

#: Trusted nights a declaration needs before its night test judges (fewer: INACTIVE, while the
#: faults that need no history are still judged).
CALIBRATION_MIN = 5

#: A value at least this many times the largest its history had (or at most the smallest divided by it) is a blow-up.
BLOWUP_RATIO = 5.0

#: Before the night test is calibrated, a night fails when at least this share of its steps leave the
#: constraint's band on the regression side.
PRIOR_SHARE = 0.25

#: After a new level began (an accept, a rebaseline, an adopted level shift), while its nights are
#: fewer than ``history_limit``, the nights before it, moved to the new level, fill the history up
#: (:func:`~airflow_metric_gate.decision.history.bridged_history`).  The new level is then known from
#: its ``n`` nights only: its error adds this many night variances over ``n`` to the bound's (1 for a
#: mean; a little more for the median of 3 or 4 nights, and for heavy tails).
BRIDGE_REF_VARIANCE = 1.5

#: Failing nights of one level shift after which it is adopted as the new baseline.
SHIFT_ADOPT = 5

#: The outcomes of the nights one reported change (a level shift or a drift) is adopted from.
ADOPTABLE = frozenset({"fail", "shift", "drift", "drift-continues"})

#: Trusted nights the drift test needs.
DRIFT_MIN = 10

#: The nights (tonight included) the drift test fits a ramp over; at most half the nights it judges.
DRIFT_RAMP_NIGHTS = 10

#: From this many judged steps on, the night statistic is taken as near normal (see :data:`HEAVY_TAIL_DF`).
MANY_STEPS = 20

#: The degrees of freedom, at most, of the night band of a declaration with fewer than
#: :data:`MANY_STEPS` steps (one value a night, say): its noise may be heavy-tailed.
HEAVY_TAIL_DF = 6

#: How many recent trusted nights must all have a step for tonight to miss it.
EXPECTED_NIGHTS = 3

#: 1 / Phi^-1(3/4): turns a median absolute deviation into a standard deviation for normal data.
MAD_TO_SD = 1.4826

_TINY = 1e-12
