"""Victims of a long prefill: requests held up while a long prompt was prefilled. Pure.

An engine that prefills a long prompt in one piece (no chunked prefill) holds every request batched with it, and
the requests that arrive meanwhile, until it is done: their TTFT grows with a prompt that is not theirs, and the
streams already decoding stop for it. From the rows alone (send time, TTFT, prompt tokens; every worker of the
step, on the step's clock): a prompt is *long* when it is at least ``LONG_FACTOR`` × the step's median prompt and
at least its 95th percentile (so a step of equal prompts has none), and a request with a shorter prompt is *behind
a long prefill* when its wait for the first token (send to first token) overlaps a long request's (``behind``), or
(``tail_rows``) it streamed through a server-wide pause that ended as a long prompt's first token came
(``pauses.StepPauses.without_prefills``). Tail attribution tests it as a flag (``tail_features``): "were held up
by a long prompt's prefill, waiting for their first token or mid-stream (77% vs 19%): head-of-line blocking behind
long prefills (prompts over 80 tokens); consider chunked prefill" (``tests/load/test_tail_mixture.py``, one run).
A request with a long prompt is left out of the test (the prompt feature speaks for it).

Cost: the threshold from a sample of at most ~5,000 prompts, the long requests' windows sorted once, then one
bisection per row tested (numpy: ~10 ms for the 20k rows a 100k-request step tests).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

__all__ = ["LONG_FACTOR", "LongPrefills", "long_prompt_threshold"]

LONG_FACTOR = 4.0
_SAMPLE = 5_000
_TENTHS_PER_MS = 10


def long_prompt_threshold(prompt: Sequence[Any] | np.ndarray) -> int | None:
    """The prompt length from which a prompt is long in this step, or None (too few prompts, or none long)."""
    step = max(1, len(prompt) // _SAMPLE)
    known = sorted(p for p in prompt[::step] if p is not None and p == p)  # None or NaN: unknown
    if len(known) < 20:
        return None
    median, p95 = known[len(known) // 2], known[int(0.95 * (len(known) - 1))]
    threshold = max(LONG_FACTOR * median, p95, 1)
    return round(threshold) if known[-1] >= threshold else None  # none long in the sample: too rare to matter


class LongPrefills:
    """Usage: ``LongPrefills(t_ms, ttft, prompt, threshold).behind(indices)`` (the rows' columns, ``metrics.rows``:
    lists, or arrays with NaN for None, ``analysis.step_columns``)."""

    def __init__(self, t_ms: Sequence[int] | np.ndarray, ttft: Sequence[Any] | np.ndarray,
                 prompt: Sequence[Any] | np.ndarray, threshold: int) -> None:
        import numpy as np  # here: numpy only in a process that judges a step (tests/load/test_lean_imports.py)

        self.t_ms, self.ttft, self.prompt = (np.asarray(c, dtype=np.float64) for c in (t_ms, ttft, prompt))
        self.threshold = threshold
        long = np.flatnonzero(self.prompt >= threshold)  # NaN: never long
        long = long[~np.isnan(self.ttft[long])]
        start, prompts = self.t_ms[long], self.prompt[long].astype(np.int64)
        end = start + self.ttft[long] / _TENTHS_PER_MS
        order = np.lexsort((prompts, end, start))  # by start, then end, then prompt
        self.starts = start[order]
        self.reach = np.maximum.accumulate(end[order])  # latest end of the first k
        firsts = np.lexsort((prompts, end))
        self.first_tokens = end[firsts].tolist()
        """When each long prompt's first token came (ms): its prefill ended then."""
        self.first_token_prompts = prompts[firsts].tolist()
        """The prompt tokens of each of ``first_tokens``: what its prefill cost grows with."""

    @property
    def count(self) -> int:
        """Long prompts with a first token."""
        return len(self.starts)

    def behind(self, idx: Sequence[int]) -> list:
        """For rows ``idx``: True when the row's wait for its first token overlapped a long prompt's; None for a long
        prompt itself and a row without TTFT or prompt."""
        import numpy as np

        at = np.asarray(idx, dtype=np.int64)
        prompt, ttft = self.prompt[at], self.ttft[at]
        asked = np.flatnonzero((prompt < self.threshold) & ~np.isnan(ttft))  # NaN prompt: not below
        sent = self.t_ms[at[asked]]
        first = sent + ttft[asked] / _TENTHS_PER_MS
        # the windows that start before each wait ends, then: does the latest-ending one reach into the wait?
        k = np.searchsorted(self.starts, first, side="left")
        reach = self.reach[np.maximum(k - 1, 0)] if len(self.reach) else np.zeros(len(k))
        out = np.full(len(at), None, dtype=object)
        out[asked] = ((k > 0) & (reach > sent)).tolist()
        return out.tolist()
