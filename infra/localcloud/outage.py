"""Compute Engine having a bad time: a share of its answers are errors or late.

Two faults, as a client meets them in Compute Engine's incidents:

* an error (503 ``backendError`` by default): the request is refused before
  anything is done, and a retry may pass;
* a late answer (``delay_s``): the request is done (a VM inserted, deleted),
  then the answer comes ``delay_s`` later, after the client's own timeout has
  given up on it. The caller saw a timeout, yet the work happened: the case a
  retry with the same ``requestId`` or a read-back must adopt.

An ``Outage`` is drawn per request from its own seeded generator, so a test
that sends the same requests in the same order meets the same faults.
Only Compute Engine's routes suffer; the local chaos routes always answer.
"""

from __future__ import annotations

import random
import re
import threading
from dataclasses import dataclass, field


@dataclass
class Outage:
    """Which requests fail and how.

    Args:
        share: the probability that a matching request meets the fault.
        status: the error's HTTP status (``delay_s`` = 0).
        reason: the error's ``errors[].reason``.
        delay_s: > 0: no error, the answer comes this late (the work is done).
        methods: the HTTP methods that suffer (empty: all).
        path_pattern: a regular expression the path must contain (empty: all).
        seed: the generator's seed.
    """

    share: float = 1.0
    status: int = 503
    reason: str = "backendError"
    delay_s: float = 0.0
    methods: frozenset[str] = frozenset()
    path_pattern: str = ""
    seed: int = 0
    errors: int = 0  # requests answered with the error so far
    delayed: int = 0  # requests answered late so far
    _rng: random.Random = field(init=False, repr=False)
    _pattern: re.Pattern[str] = field(init=False, repr=False)
    _lock: threading.Lock = field(init=False, repr=False, default_factory=threading.Lock)

    def __post_init__(self) -> None:
        if not 0.0 <= self.share <= 1.0:
            raise ValueError(f"share {self.share} is not between 0 and 1")
        if self.delay_s < 0:
            raise ValueError(f"delay_s {self.delay_s} is negative")
        if self.delay_s == 0 and not 400 <= self.status <= 599:
            raise ValueError(f"status {self.status} is not an HTTP error")
        self._rng = random.Random(self.seed)
        self._pattern = re.compile(self.path_pattern)

    def hits(self, method: str, path: str) -> bool:
        """Whether this request meets the fault (counted when it does)."""
        if self.methods and method not in self.methods:
            return False
        if not self._pattern.search(path):
            return False
        with self._lock:
            if self._rng.random() >= self.share:
                return False
            if self.delay_s > 0:
                self.delayed += 1
            else:
                self.errors += 1
            return True
