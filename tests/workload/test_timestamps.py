"""Trace timestamps (harness/workload/traces.py): numbers and ISO 8601 with any fraction and UTC offset."""

from __future__ import annotations

import pytest

from harness.workload.traces import TraceError, read_timestamps


@pytest.mark.parametrize("stamp, seconds", [
    ("1714557603.25", 1714557603.25),
    ("2024-05-01T10:00:03.25Z", 1714557603.25),
    ("2024-05-01 10:00:03.2500001", 1714557603.2500001),  # more digits than datetime keeps
    ("2024-05-01T12:00:03.125+02:00", 1714557603.125),     # fraction and offset together
    ("2024-05-01T08:30:03.125-0130", 1714557603.125),
    ("2024-05-01T10:00:03", 1714557603.0),                 # no offset: UTC
])
def test_timestamps(tmp_path, stamp, seconds):
    path = tmp_path / "t.csv"
    path.write_text(f"ts\n1714557600\n{stamp}\n")
    assert read_timestamps(str(path), "ts") == [1714557600, pytest.approx(seconds, abs=1e-6)]


def test_a_bad_timestamp_names_the_line(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("ts\n2024-05-01T10:00:03\nyesterday\n")
    with pytest.raises(TraceError, match=r"t\.csv:3"):
        read_timestamps(str(path), "ts")
