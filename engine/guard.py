"""The throughput guard: speculation never costs much more than it gives, whatever its estimates said.

It compares what speculative steps actually deliver with the plain step measured live on this
machine now (a plain step is interleaved now and then to keep that reference fresh). Their
accumulated loss (a CUSUM: gains do not bank credit) may reach LOSS_BUDGET_TOKENS plain tokens'
worth; then the drafter is suspended and probed again after a doubling back-off. No fixed margin
stands in for a measurement. Runs behind each constant: docs/design-engine.md.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.costs import VerifyCosts

# A step slower than this many times the usual cost of its size was slowed by the machine (another
# program), not by drafting: it is counted at that cap. A drafter slow every step raises its
# size's median and is not capped.
OUTLIER = 3.0
LOSS_BUDGET_TOKENS = 16.0  # accumulated loss, in plain tokens' worth, before a drafter is suspended
RESUME_BUDGET_TOKENS = 2.0  # ...and, after a suspension, before it is suspended again
BACKOFF_FIRST = 16  # plain steps a suspended drafter waits before it is probed again...
BACKOFF_MAX = 1024  # ...doubling each time it fails again
PLAIN_REFRESH_STEPS = 64  # speculative steps between plain steps that re-measure the reference


@dataclass
class ThroughputGuard:
    loss_s: float = 0.0  # CUSUM of (step time - tokens x plain step time) over speculative steps
    gain_s: float = 0.0  # plain time saved since the last resume (resets the back-off when large)
    suspended_steps: int = 0  # plain steps left before the drafter is probed again
    backoff: int = BACKOFF_FIRST
    since_plain: int = 0  # speculative steps since the last plain step
    reference_due: bool = False  # it would suspend on a plain step timed in another process
    n_suspensions: int = 0

    @property
    def suspended(self) -> bool:
        return self.suspended_steps > 0

    def wait(self, plain_s: float) -> bool:
        """A step while suspended: True (plain) until the back-off is over. The probe that
        follows may lose only RESUME_BUDGET_TOKENS more before the drafter is suspended again
        (for twice as long): a drafter that keeps failing costs a few tokens per probe, not a
        whole budget each time; one that pays earns the budget back as its gains bring the sum
        down."""
        if self.suspended_steps <= 0:
            return False
        self.suspended_steps -= 1
        if self.suspended_steps == 0:
            self.loss_s = max(0.0, LOSS_BUDGET_TOKENS - RESUME_BUDGET_TOKENS) * plain_s
            self.gain_s = 0.0
        return True

    def reference_stale(self, costs: VerifyCosts) -> bool:
        """Is a plain step due to time the reference (none yet, an old one, or one from another
        process before a suspension)? Not before it is needed: a reply's first step at plain
        speed costs copying ~2%."""
        return 1 not in costs.median or self.reference_due or self.since_plain >= PLAIN_REFRESH_STEPS

    def note_plain_step(self) -> None:
        self.since_plain = 0
        self.reference_due = False

    def note_speculative_step(self) -> None:
        self.since_plain += 1

    @staticmethod
    def usual(costs: VerifyCosts, n_rows: int, step_s: float, draft_s: float) -> float:
        """step_s as the guard counts it: at most OUTLIER times the usual cost of an n_rows batch
        (its median once timed 3 times, else n_rows plain steps, which no CPU verify batch costs
        more than) plus the drafting it took."""
        plain_s = costs.plain_s
        if plain_s is None:
            return step_s
        usual = costs.usual(n_rows)
        return min(step_s, OUTLIER * (usual if usual is not None else n_rows * plain_s) + draft_s)

    def judge(self, costs: VerifyCosts, n_emitted: int, step_s: float) -> float:
        """A speculative step that emitted n_emitted tokens in step_s, against plain steps
        measured live: returns what it saved (< 0: lost), and suspends the drafter where the
        losses pass the budget."""
        plain_s = costs.plain_s
        if plain_s is None:
            return 0.0
        delta = step_s - n_emitted * plain_s  # > 0: plain decoding would have been faster
        self.loss_s = max(0.0, self.loss_s + delta)
        self.gain_s -= delta
        if self.gain_s > LOSS_BUDGET_TOKENS * plain_s:
            self.backoff = BACKOFF_FIRST  # it pays: a later bad patch is probed again soon
        if self.loss_s > LOSS_BUDGET_TOKENS * plain_s:
            if 1 not in costs.live:
                self.reference_due = True  # judge by a plain step timed now, then decide
                return -delta
            self.suspended_steps = self.backoff
            self.backoff = min(2 * self.backoff, BACKOFF_MAX)
            self.loss_s = self.gain_s = 0.0
            self.n_suspensions += 1
        return -delta
