"""harness/load/locust_stats.py: Locust's per-second request counts trimmed to what Locust reads, on Locust's own
RequestStats (its RPS figures the same before and after)."""

from __future__ import annotations

from types import ModuleType

import pytest


@pytest.fixture(scope="module")
def stats_module() -> ModuleType:
    """Locust's stats, imported without gevent's monkey-patching (as tests/load/test_locust_patches.py does)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LOCUST_SKIP_MONKEY_PATCH", "1")  # read by locust/__init__.py, only on first import
        import locust.stats
    return locust.stats


def test_old_seconds_go_and_locusts_rps_stays(stats_module: ModuleType) -> None:
    from harness.load.locust_stats import KEEP_S, trim_per_second

    stats = stats_module.RequestStats()
    entries = [stats.get("/v1/chat/completions", "POST"), stats.get("/v1/completions", "POST"), stats.total]
    for entry in entries:
        entry.start_time = 1000.0
        for t in range(1000, 4600):  # an hour, a request a second and a failure every tenth
            entry.num_reqs_per_sec[t] += 1 + t % 3
            if t % 10 == 0:
                entry.num_fail_per_sec[t] += 1
    for entry in entries:
        entry.last_request_timestamp = 4599.5
    before = [(e.current_rps, e.current_fail_per_sec) for e in entries]

    dropped = trim_per_second(stats, 4599.5)

    assert [(e.current_rps, e.current_fail_per_sec) for e in entries] == before
    assert before[0][0] > 0 and before[0][1] > 0
    kept = 4599 - KEEP_S
    for entry in entries:
        assert min(entry.num_reqs_per_sec) == kept and max(entry.num_reqs_per_sec) == 4599
        assert min(entry.num_fail_per_sec) >= kept
    assert dropped == 3 * ((kept - 1000) + (kept - 1000 + 9) // 10)
    assert trim_per_second(stats, 4599.5) == 0
