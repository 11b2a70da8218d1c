"""engine/probes.py on its own: probes back off while they fail, and exploring drafts longer now and then."""

from __future__ import annotations

import numpy as np

from engine.kinds import Choice, DrafterKind
from engine.probes import EXPLORE_EVERY, PROBE_FIRST, PROBE_MAX, Priced, Probes


def test_probes_come_every_so_many_plain_steps_the_interval_doubling_while_they_fail() -> None:
    probes = Probes()
    assert [probes.counts_plain() for _ in range(PROBE_FIRST)] == [False] * (PROBE_FIRST - 1) + [True]
    probes.probed()
    assert probes.probing and probes.plain_steps == 0 and probes.interval == 2 * PROBE_FIRST
    for _ in range(10):
        probes.probed()
    assert probes.interval == PROBE_MAX


def test_every_eighth_drafting_step_drafts_longer_than_the_best() -> None:
    rates = np.array([1.0, 1.5, 1.8, 2.0, 2.0, 1.95, 1.9, 1.7, 1.5])  # k = 4 best, 6 within 10%
    best = Priced(2.0, 4, DrafterKind.COPY, limit=8, reach=8, rates=rates)
    probes = Probes()
    choices = [probes.explore(best, costly=False) for _ in range(EXPLORE_EVERY)]
    assert choices[:-1] == [Choice(4, DrafterKind.COPY)] * (EXPLORE_EVERY - 1)
    assert choices[-1] == Choice(8, DrafterKind.COPY)  # twice the best, within the limit
    # The longest priced within EXPLORE_LOSS of the best, where longer than twice the best.
    flat = np.array([1.0, 1.9, 2.0, 1.95, 1.9, 1.85, 1.81, 1.5])
    near = Probes(spec_steps=EXPLORE_EVERY - 1)
    assert near.explore(Priced(2.0, 2, DrafterKind.COPY, 7, 7, flat), costly=False).k == 6
    costly = Probes(spec_steps=EXPLORE_EVERY - 1)
    assert costly.explore(Priced(2.0, 4, DrafterKind.MODEL, 6, 6, rates), costly=True).k == 6
    at_reach = Probes(spec_steps=EXPLORE_EVERY - 1)
    assert at_reach.explore(Priced(2.0, 4, DrafterKind.COPY, 4, 4, rates), costly=False).k == 4
