"""A run's budget: wall-clock seconds for the whole command, setup included.

The clock starts when the command starts (the CLI passes that instant), so imports,
opening the store, references, host peaks and baseline timings all count. The budget is
cut into phases by share:

```
started                                   search_end  hard_end          end   end + grace
   │ setup │ search (agents, evaluations)     │ in-flight │ closing table │      │
   └───────┴──────────────────────────────────┴───────────┴───────────────┴──────┘
```

No new evaluation starts after ``search_end``; evaluations still running at ``hard_end``
are cancelled (no verdict); the closing side-by-side table is sized to what is left. Where
the closing table's own need (``reserve_s``, from the baselines' measured times) is larger
than its share, both move earlier. The run keeps that need only once it has a champion
to confirm (see :mod:`swarmfab.swarm.closing`), so a champion crowned then moves both.
The command ends by ``end + grace``, the grace being what a process needs to wind down
(the larger of 10% of the budget and 15 s), and is stated to the user up front.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

__all__ = ["FINAL_SHARE", "GRACE_SHARE", "SETUP_SHARE", "Budget"]

FINAL_SHARE = 0.2  # of the budget kept for the closing side-by-side measurement
GRACE_SHARE = FINAL_SHARE / 2  # evaluations in flight may finish in this part of it
SETUP_SHARE = 0.5  # setup estimated above this share of the budget is refused up front
RESERVE_MARGIN = 1.25  # the closing table's estimated need, with room for error


@dataclass(frozen=True, slots=True)
class Budget:
    """``seconds`` of wall time from ``started`` (a ``time.monotonic()`` instant)."""

    started: float
    seconds: float
    reserve_s: float = 0.0  # kept free of evaluations at the end: the closing table's need

    @property
    def grace_s(self) -> float:
        """How far past the budget the command may end: max(10%, 15 s)."""
        return max(0.1 * self.seconds, 15.0)

    @property
    def search_end(self) -> float:
        """No evaluation starts after this."""
        return min(self.started + self.seconds * (1 - FINAL_SHARE),
                   self.end - RESERVE_MARGIN * self.reserve_s)

    @property
    def hard_end(self) -> float:
        """Evaluations still running now are cancelled."""
        return min(self.started + self.seconds * (1 - GRACE_SHARE), self.end - self.reserve_s)

    @property
    def end(self) -> float:
        return self.started + self.seconds

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def left(self) -> float:
        """Seconds until the budget's end (negative once past it)."""
        return self.end - time.monotonic()

    def describe(self) -> str:
        return f"budget {self.seconds:.0f} s (+{self.grace_s:.0f} s grace), setup included"
