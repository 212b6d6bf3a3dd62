"""Did the server free the slots of users who hung up (``analysis/cancel_slots.py``). Pure."""

from __future__ import annotations

import msgspec
import pytest

from harness.analysis.cancel_slots import MARGIN, cancel_slots
from harness.summary import Server


def srv(gauges: dict | None) -> Server | None:
    """The step's ``server`` block with these gauges."""
    return None if gauges is None else msgspec.convert(gauges, Server)


def test_the_clients_concurrency_by_littles_law_against_the_servers_gauges():
    # 8 requests in flight for 10 s: 80,000 ms of requests; the server held 7.6 running + 0.6 waiting
    got = cancel_slots(80_000, 10.0, srv({"running_mean": 7.6, "waiting_mean": 0.6}), cancelled=12)
    assert got.client_in_flight_mean == 8.0 and got.server_in_system_mean == pytest.approx(8.2)
    assert got.freed is True and "it freed the slots" in got.words


@pytest.mark.parametrize("held, freed", [(8 * (1 + MARGIN[0]) + MARGIN[1], True), (8 * (1 + MARGIN[0]) + 1.01, False),
                                         (14.0, False)])
def test_a_server_holding_more_than_the_client_sent_kept_working(held, freed):
    got = cancel_slots(80_000, 10.0, srv({"running_mean": held, "waiting_mean": None}), cancelled=3)
    assert got.freed is freed
    assert ("kept working after users hung up (or another client shares it)" in got.words) is not freed


@pytest.mark.parametrize("busy, seconds, server, cancelled", [
    (80_000, 10.0, {"running_mean": 8.0}, 0),  # no hang-ups: nothing to say
    (80_000, 0.0, {"running_mean": 8.0}, 3),  # no measured time
    (80_000, 10.0, {"running_mean": None, "waiting_mean": 1.0}, 3),  # the server has no running gauge
    (80_000, 10.0, None, 3),  # no /metrics at all
])
def test_nothing_is_said_without_hang_ups_time_or_a_running_gauge(busy, seconds, server, cancelled):
    assert cancel_slots(busy, seconds, srv(server), cancelled) is None
