"""LoRA adapters (``endpoint.adapters``): which adapter of a base model each request names. Pure.

A deployment that serves many LoRA adapters of one base model (vLLM ``--enable-lora --lora-modules``, SGLang
``--lora-paths``) is asked for an adapter by the request's ``model``. The load decides how adapters are spread:

- ``round_robin``: each in turn (a worker's requests cycle through the list);
- ``uniform``: each equally likely, drawn per request;
- ``zipf``: the k-th adapter with weight 1/k^s (``zipf_s``, 1.0 by default): a few hot adapters and a long cold tail,
  the case where adapter loading (``--max-loras`` slots) shows — SGLang's benchmark calls this skewed.

::

    endpoint:
      model: llama-3-8b
      adapters: {count: 16, pattern: "tenant-{i}", pick: zipf, zipf_s: 1.2}   # or names: [sql, chat, legal]

The names are ``names`` as given, or ``pattern`` with ``{i}`` = 0 … count−1 (``lora-{i}`` by default). Each
request's adapter is counted per step (``steps[].adapters``) and saved with ``--save-requests`` (``model``).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from itertools import accumulate
from typing import Any

from harness.checker import Checker

__all__ = ["PICKS", "AdapterSpec", "adapter_picker", "adapters_from_spec"]

PICKS = ("round_robin", "uniform", "zipf")
MAX_ADAPTERS = 10_000


@dataclass(frozen=True)
class AdapterSpec:
    names: tuple[str, ...]
    pick: str = "round_robin"
    zipf_s: float = 1.0

    def weights(self) -> list[float]:
        """Each adapter's share of requests as the pick means it (round robin and uniform: equal)."""
        raw = [1 / (k ** self.zipf_s) for k in range(1, len(self.names) + 1)] if self.pick == "zipf" else \
            [1.0] * len(self.names)
        total = sum(raw)
        return [w / total for w in raw]


def adapters_from_spec(node: Any, path: str, check: Checker) -> AdapterSpec | None:
    """An ``adapters`` block at ``path``; every problem goes to ``check`` (then None)."""
    before = len(check.problems)
    if check.mapping(node, path, ("names", "count", "pattern", "pick", "zipf_s")) is None:
        return None
    if ("names" in node) == ("count" in node):
        check.fail(path, "give either names: [a, b, ...] or count: N (with pattern, lora-{i} by default)")
        return None
    if "names" in node:
        names = node["names"]
        if not isinstance(names, list) or not names or not all(isinstance(n, str) and n for n in names):
            check.fail(f"{path}.names", "expected a non-empty list of adapter names (the model each request names)")
            return None
        if len(set(names)) < len(names):
            check.fail(f"{path}.names", "each adapter once: the list has repeats")
        if "pattern" in node:
            check.fail(f"{path}.pattern", "pattern goes with count, not with names")
    else:
        count = check.number(node, "count", path, None, integer=True, minimum=1, maximum=MAX_ADAPTERS)
        pattern = check.string(node, "pattern", path, "lora-{i}")
        if isinstance(pattern, str) and "{i}" not in pattern:
            check.fail(f"{path}.pattern", f"must hold {{i}} (the adapter's number), got {pattern!r}")
            return None
        names = [pattern.replace("{i}", str(i)) for i in range(count or 0)] if pattern else []
    pick = check.string(node, "pick", path, "round_robin", choices=PICKS)
    zipf_s = check.number(node, "zipf_s", path, 1.0, above=0)
    if "zipf_s" in node and pick != "zipf":
        check.fail(f"{path}.zipf_s", "goes with pick: zipf")
    return AdapterSpec(tuple(names), pick, float(zipf_s or 1.0)) if len(check.problems) == before else None


def adapter_picker(spec: AdapterSpec, rng: random.Random, start: int = 0) -> Callable[[], str]:
    """Each call: the next request's adapter. ``rng``: the caller's seeded stream (uniform, zipf); ``start``: where a
    round robin begins (a worker's index, so a fleet's workers do not all start on the first adapter)."""
    names = spec.names
    if spec.pick == "round_robin":
        turn = [start % len(names)]

        def next_in_turn() -> str:
            i = turn[0]
            turn[0] = (i + 1) % len(names)
            return names[i]
        return next_in_turn
    if spec.pick == "uniform":
        return lambda: names[rng.randrange(len(names))]
    cum = list(accumulate(spec.weights()))
    return lambda: rng.choices(names, cum_weights=cum)[0]
