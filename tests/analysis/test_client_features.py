"""The client as a cause of the tail (``tail_features``: ``send_ms``, ``loop_lag_ms``): pure, on TailRows."""

from __future__ import annotations

import random

from harness.analysis.why.attribute import TailParams, TailRow, explain_tail


def _rows(lagged: bool, sub_ms: bool = False) -> list[TailRow]:
    rng = random.Random(3)
    rows = []
    for i in range(2000):
        behind = i % 25 == 7  # 4%: sent while the worker's loop was behind
        lag = (rng.uniform(0.2, 0.9) if sub_ms else rng.uniform(15, 30)) if behind and lagged else rng.uniform(0, 0.5)
        ttft = rng.uniform(0.04, 0.06) + (0.2 if behind and lagged else 0)
        rows.append(TailRow(ttft_s=ttft, prompt_tokens=400 + rng.randrange(200), loop_lag_ms=lag,
                            send_ms=rng.uniform(0, 0.3), worker=0, t_in_step_s=i * 0.01))
    return rows


def test_a_generator_behind_at_send_is_named_as_the_client():
    a = explain_tail(_rows(lagged=True)).get("ttft_s", 0.95)
    assert a.causes[0] == "loop_lag_ms", a.line
    assert "loop lagged" in a.line and "the load generator" in a.line, a.line


def test_with_kernel_stamps_the_loops_lag_at_send_is_not_tested():
    # the kernel dated every receive: a loop behind cannot have dated a first token late (a first chunk read with
    # later ones is late_first), so a lag that goes with the tail is a symptom of a busy machine, not a cause
    a = explain_tail(_rows(lagged=True), TailParams(kernel_stamps=True)).get("ttft_s", 0.95)
    assert a.tests and "loop_lag_ms" not in {t.feature for t in a.tests} and "loop_lag_ms" not in a.causes, a.line
    assert "loop_lag_ms" in {t.feature for t in explain_tail(_rows(lagged=True)).get("ttft_s", 0.95).tests}


def test_lag_under_a_millisecond_is_no_cause():
    # the slow requests had 0.2-0.9 ms of lag against 0-0.5 ms: it goes with the tail, but cannot hold a TTFT back
    # by 200 ms (something else did): values under 1 ms count as 0, so the lag is not named
    a = explain_tail(_rows(lagged=True, sub_ms=True)).get("ttft_s", 0.95)
    assert "loop_lag_ms" not in a.causes and "send_ms" not in a.causes, a.line


def test_a_tail_of_late_reads_is_named_as_the_client_not_a_server_pause():
    """A starved reader dates a burst of chunks by the newest: the requests whose chunk times came from such a late
    read make the TTFT tail, and the tail says the load generator fell behind."""
    rng = random.Random(5)
    rows = []
    for i in range(2000):
        late = i % 20 == 3  # 5%: the reader was descheduled when their first chunks came
        rows.append(TailRow(ttft_s=rng.uniform(0.004, 0.006) + (0.02 if late else 0), prompt_tokens=32,
                            late_stamps=late or rng.random() < 0.01, loop_lag_ms=rng.uniform(0, 0.5), worker=0,
                            t_in_step_s=i * 0.003))
    a = explain_tail(rows).get("ttft_s", 0.95)
    assert a.causes[0] == "late_stamps" and "reader fell behind" in a.line and "the load generator" in a.line, a.line



def test_the_loop_lag_at_send_is_no_cause_of_the_time_between_tokens():
    """A busy machine slows the server's tokens and the client's loop at once: the lag is tested against the metrics
    it can be inside (TTFT, TTFO), not against TPOT (``tail.ONLY_FOR``)."""
    rng = random.Random(9)
    rows = []
    for i in range(2000):
        busy = i % 25 == 7
        rows.append(TailRow(ttft_s=rng.uniform(0.04, 0.06), tpot_s=rng.uniform(0.02, 0.03) + (0.05 if busy else 0),
                            prompt_tokens=400, loop_lag_ms=rng.uniform(15, 30) if busy else rng.uniform(0, 0.5),
                            worker=0, t_in_step_s=i * 0.01))
    tails = explain_tail(rows)
    tpot = tails.get("tpot_s", 0.95)
    assert "loop_lag_ms" not in {t.feature for t in tpot.tests} and "load generator" not in tpot.line, tpot.line
    assert "loop_lag_ms" in {t.feature for t in tails.get("ttft_s", 0.95).tests}


def test_a_client_made_tail_is_the_clients_and_the_queue_it_made_is_no_cause():
    """A starved client (tests/load/test_tail_client.py, measured): its late reads make the TTFT tail, and the bursts
    it sends once it runs again meet a queue at the server: both separate the tail, the late first chunk more. The
    client is named; the queue at send is said to have grown with it, not named as a cause."""
    rng = random.Random(11)
    rows = []
    for i in range(3000):
        late = i % 20 == 3  # 5%: the reader was descheduled when their first chunk came
        burst = (late and rng.random() < 0.7) or rng.random() < 0.1  # sent in a burst after the stall, mostly
        rows.append(TailRow(ttft_s=rng.uniform(0.0035, 0.0045) + (rng.uniform(0.002, 0.004) if late else 0),
                            prompt_tokens=32, late_first=late, late_stamps=True, server_waiting=1 if burst else 0,
                            loop_lag_ms=rng.uniform(0, 0.5), worker=0, t_in_step_s=i * 0.002))
    a = explain_tail(rows).get("ttft_s", 0.95)
    assert a.causes[0] == "late_first" and "first chunk read late" in a.line and "load generator" in a.line, a.line
    assert not {"server_waiting", "in_flight"} & set(a.causes), a.line
    assert "the queue at send grew with it" in a.line, a.line
    queued = next(t for t in a.tests if t.feature == "server_waiting")
    assert queued.significant  # the queue did separate the tail: said, as the client's doing


def test_a_true_queue_is_still_named_when_the_client_kept_up():
    rng = random.Random(12)
    rows = []
    for i in range(3000):
        queued = i % 20 == 3
        rows.append(TailRow(ttft_s=rng.uniform(0.0035, 0.0045) + (rng.uniform(0.01, 0.02) if queued else 0),
                            prompt_tokens=32, late_first=rng.random() < 0.02, late_stamps=rng.random() < 0.05,
                            server_waiting=rng.randrange(3, 6) if queued else rng.randrange(0, 2),
                            loop_lag_ms=rng.uniform(0, 0.5), worker=0, t_in_step_s=i * 0.002))
    a = explain_tail(rows).get("ttft_s", 0.95)
    assert a.causes[0] == "server_waiting" and "late_first" not in a.causes, a.line
