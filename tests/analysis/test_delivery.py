"""How a step's chunks came (``analysis/delivery.py``) from its bucket's counters: the path, the server's writes,
or one chunk a receive; a late reader's bunching is not taken for the server's."""

from __future__ import annotations

from harness.analysis.delivery import delivery


def test_streams_held_on_the_way_name_the_path_and_its_buffer_size():
    d = delivery({"streams": 12, "receives": 60, "content_chunks": 3600, "held_streams": 12, "held_kb:16": 11,
                  "held_kb:32": 1})
    assert d.cause == "path" and d.held_kb == 16, d
    assert "100% of the streams came held on the way (12 with events cut at ~16 KB" in d.line, d.line
    whole = delivery({"streams": 72, "receives": 72, "content_chunks": 3456, "whole_streams": 72})
    assert whole.cause == "path" and "72 whole in one receive" in whole.line and whole.held_kb is None


def test_several_chunks_a_receive_on_time_are_the_servers_writes_and_a_late_readers_are_not():
    d = delivery({"streams": 100, "receives": 1200, "content_chunks": 4800})
    assert d.cause == "server_writes" and d.on_time_chunks_per_receive == 4.0, d
    late = delivery({"streams": 100, "receives": 4000, "content_chunks": 4800, "late_chunks": 800})
    assert late.cause is None and late.chunks_per_receive == 1.2 and late.line == "", late


def test_a_few_held_streams_are_noise_and_no_stream_says_nothing():
    assert delivery({"streams": 100, "receives": 4800, "content_chunks": 4800, "held_streams": 9}).cause is None
    assert delivery({"streams": 0}) is None and delivery({}) is None
