"""Users who hang up: ``cancel`` and ``patience``, keys of the workload or of a class of its mix. Pure.

::

    workload:
      cancel: {share: 0.1, after_s: {dist: uniform, min: 0.5, max: 3}}   # 10% of requests: closed 0.5-3 s after sent
      patience: {ttft_s: 5}                                             # any request: closed when no token by 5 s

``cancel``: each request is drawn (from the sampler's own seeded stream) to be cancelled with probability ``share``;
a cancelled one gets a delay from ``after_s`` (a duration: seconds or a distribution, ``spec.duration_from_spec``),
counted from the moment the request was fully sent, as AIPerf's ``--request-cancellation-delay`` is: the server has
the whole request however long the connect or the send took. ``patience``: a request whose first token has not come
``ttft_s`` after its start (TTFT's own origin) is closed then. A stream that ends before either is a plain request.

The client closes the connection at that moment (``client/deadline.py``); the record is *cancelled*, not failed
(``metrics/record.py``), and counted apart (``metrics/aggregate.py``, docs/metrics.md "Cancelled requests").
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from harness.checker import Checker
from harness.workload.lengths import Duration
from harness.workload.spec import duration_from_spec

__all__ = ["HANGUP_KEYS", "Cancel", "Patience", "cancel_from_spec", "patience_from_spec"]

HANGUP_KEYS = ("cancel", "patience")
"""The workload's (and a class's) keys for users who hang up."""


@dataclass(frozen=True)
class Cancel:
    share: float
    """Of requests, in (0, 1]."""
    after_s: Duration
    """Seconds from the request fully sent to the hang-up."""

    def draw(self, rng: random.Random) -> float | None:
        """The next request's delay before it is cancelled, or None when it is not one of the share."""
        return self.after_s.sample(rng) if rng.random() < self.share else None


@dataclass(frozen=True)
class Patience:
    ttft_s: float
    """A request with no first token this long after its start is closed then."""


def cancel_from_spec(node: Any, path: str, check: Checker) -> Cancel | None:
    """``{share, after_s}``; problems go to ``check`` (the result is then None)."""
    if check.mapping(node, path, ("share", "after_s"), required=("share", "after_s")) is None:
        return None
    before = len(check.problems)
    share = check.number(node, "share", path, None, above=0, maximum=1)
    after = duration_from_spec(node["after_s"], f"{path}.after_s", check) if "after_s" in node else None
    if len(check.problems) > before or share is None or after is None:
        return None
    return Cancel(float(share), after)


def patience_from_spec(node: Any, path: str, check: Checker) -> Patience | None:
    """``{ttft_s}``; problems go to ``check`` (the result is then None)."""
    if check.mapping(node, path, ("ttft_s",), required=("ttft_s",)) is None:
        return None
    ttft = check.number(node, "ttft_s", path, None, above=0)
    return None if ttft is None else Patience(float(ttft))
