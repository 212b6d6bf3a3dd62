"""Which LoRA adapters one engine holds, as vLLM's ``--max-loras`` GPU slots: at most K at once, least recently used
out first, never one a running sequence uses. Pure: names in, "did this cost a load" out.

vLLM semantics (``vllm/v1/core/sched/scheduler.py``, ``vllm/lora/worker_manager.py``): a batch mixes at most
``max_loras`` distinct adapters; a waiting request whose adapter would be one too many is skipped (it keeps its
place in the queue and requests behind it may go first). An adapter not resident is loaded when a batch needs it,
evicting the least recently used one that no running request uses; the load holds up that whole iteration.
The engine (``engine.py``) asks ``fits`` before admitting, ``acquire`` on admission (True: it paid a load),
``release`` when the sequence leaves the batch (finished, aborted or preempted).

Usage::

    slots = LoraSlots(max_loras=2)
    slots.acquire("a"), slots.acquire("b")   # (True, True): both loaded
    slots.fits("c")                          # False: a and b are both in use
    slots.release("a"); slots.acquire("c")   # True: c loaded, a (idle, least recent) evicted
"""

from __future__ import annotations

from collections import Counter, OrderedDict

__all__ = ["LoraSlots"]


class LoraSlots:
    """The adapters resident on one engine, least recently used first, and how many running sequences use each."""

    def __init__(self, max_loras: int) -> None:
        if max_loras < 1:
            raise ValueError(f"max_loras must be >= 1, got {max_loras}")
        self.max_loras = max_loras
        self.resident: OrderedDict[str, None] = OrderedDict()
        """Adapters loaded, least recently acquired first."""
        self.active: Counter[str] = Counter()
        """Running sequences per adapter (only adapters in use)."""
        self.loads_total = 0
        self.evictions_total = 0

    def fits(self, name: str) -> bool:
        """Whether a sequence of adapter ``name`` may join the batch now: its adapter is already in the batch, or the
        batch uses fewer than ``max_loras`` adapters."""
        return name in self.active or len(self.active) < self.max_loras

    def acquire(self, name: str) -> bool:
        """A sequence of adapter ``name`` joins the batch (``fits`` said yes); True when the adapter had to be loaded
        (evicting the least recently used idle one when all slots are taken)."""
        if not self.fits(name):
            raise ValueError(f"adapter {name!r} does not fit: {len(self.active)} adapters in use, max {self.max_loras}")
        loaded = name not in self.resident
        if loaded:
            if len(self.resident) >= self.max_loras:
                victim = next(n for n in self.resident if n not in self.active)
                del self.resident[victim]
                self.evictions_total += 1
            self.resident[name] = None
            self.loads_total += 1
        else:
            self.resident.move_to_end(name)
        self.active[name] += 1
        return loaded

    def release(self, name: str) -> None:
        """A sequence of adapter ``name`` left the batch; the adapter stays resident until evicted."""
        self.active[name] -= 1
        if self.active[name] <= 0:
            del self.active[name]
