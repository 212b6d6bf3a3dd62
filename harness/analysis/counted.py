"""Which steps count: the one rule the knee, the SLO verdict, the gate, the sweep map and the console read. Pure.

A step counts when it measured requests, the fleet stayed the same under it, it ran its measured part to the
plan's end, and its load generator kept time. Any other step is reported with its figures but can neither pass
nor fail an SLO, move the knee or be compared: its figures are not the server's at the load it names.
``summary.json`` writes the verdict per step (``counted``, ``why``); older files are judged by the same rule.
"""

from __future__ import annotations

from typing import Protocol

__all__ = ["WHY", "StepFacts", "not_counted", "why_not"]

WHY = {
    "empty": "empty: no measured requests",
    "fleet_changed": "the fleet changed during it (its level was re-run)",
    "incomplete": "incomplete: cut short before its measured part was done",
    "unreliable": "the load generator was unreliable (loop lag or CPU): its latencies carry the generator's",
}
"""Each reason a step does not count, in words; the key is ``steps[].why`` in summary.json."""


class _Health(Protocol):
    @property
    def reliable(self) -> bool: ...


class StepFacts(Protocol):
    """What the rule reads of a step: the master's ``StepResult`` and the summary's ``Step`` both have it."""

    @property
    def requests(self) -> int: ...
    @property
    def fleet_changed(self) -> bool: ...
    @property
    def complete(self) -> bool: ...
    @property
    def generator(self) -> _Health: ...


def why_not(*, requests: int, fleet_changed: bool, complete: bool, reliable: bool) -> str | None:
    """The key in ``WHY`` of the first reason the step does not count, or None when it counts."""
    if not requests:
        return "empty"
    if fleet_changed:
        return "fleet_changed"
    if not complete:
        return "incomplete"
    return None if reliable else "unreliable"


def not_counted(step: StepFacts) -> str | None:
    """``why_not`` of a step result or a summary's step."""
    return why_not(requests=step.requests, fleet_changed=step.fleet_changed, complete=step.complete,
                   reliable=step.generator.reliable)
