"""The master's watch over its workers on a fake runner and a fake clock: losses, joins, clocks, a plain abort."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from locust.runners import STATE_MISSING, STATE_RUNNING, STATE_STOPPING

from harness.load import fleet as fleet_mod
from harness.load.fleet import FleetWatch


class Runner:
    def __init__(self, *ids: str) -> None:
        self.state = STATE_RUNNING
        self.clients = SimpleNamespace(all=[SimpleNamespace(id=i, state=STATE_RUNNING) for i in ids])
        self.quit_called = False

    def set(self, worker: str, state: str) -> None:
        next(c for c in self.clients.all if c.id == worker).state = state

    def quit(self) -> None:
        self.quit_called = True


class Control:
    def __init__(self) -> None:
        self.changes: list[tuple[str, str]] = []
        self.stop_reason: str | None = None
        self.finalized = False

    def fleet_change(self, kind: str, worker: str) -> None:
        self.changes.append((kind, worker))


@pytest.fixture
def watch(monkeypatch):
    monkeypatch.setattr(fleet_mod, "clock_every_s", lambda: 60.0)
    t = [0.0]
    runner, control, measured = Runner("a", "b"), Control(), []
    w = FleetWatch(runner, control, measure=measured.append, plain=False, clock=lambda: t[0])  # type: ignore[arg-type]
    w.begin()
    return SimpleNamespace(w=w, t=t, runner=runner, control=control, measured=measured)


def test_every_worker_is_measured_at_start_and_again_every_minute(watch):
    assert watch.measured == ["a", "b"]
    watch.t[0] = 30.0
    assert watch.w.poll() and watch.measured == ["a", "b"]
    watch.t[0] = 60.0
    assert watch.w.poll() and watch.measured == ["a", "b", "a", "b"]


def test_a_missing_worker_is_lost_once_and_a_new_one_joins_and_is_measured(watch):
    watch.runner.set("b", STATE_MISSING)
    watch.runner.clients.all.append(SimpleNamespace(id="c", state=STATE_RUNNING))
    assert watch.w.poll() and watch.w.poll()
    assert watch.control.changes == [("lost", "b"), ("joined", "c")]
    assert watch.measured == ["a", "b", "c"]


def test_workers_stopping_at_the_end_are_no_fleet_change(watch):
    watch.runner.state = STATE_STOPPING
    watch.runner.set("a", STATE_MISSING)
    assert watch.w.poll() and watch.control.changes == []


def test_an_abort_ends_a_plain_run_but_not_a_shape_run(watch):
    watch.control.stop_reason = "worker lost: b (load.on_worker_loss: abort)"
    assert watch.w.poll() and not watch.runner.quit_called  # a shape ends by itself
    watch.w.plain = True
    assert not watch.w.poll() and watch.runner.quit_called
