"""Victims of a long prefill from rows (``analysis/why/prefill_hol.py``): pure, on hand-made send times and TTFTs."""

from __future__ import annotations

from harness.analysis.why.prefill_hol import LongPrefills, long_prompt_threshold


def test_a_long_prompt_is_long_against_its_own_step():
    assert long_prompt_threshold([100] * 97 + [1500] * 3) == 400  # 4x the median, above the 95th percentile
    assert long_prompt_threshold([100] * 100) is None  # all alike: none is long
    assert long_prompt_threshold([100, 1500]) is None  # too few to say
    lognormal_like = [100 + 10 * k for k in range(100)]  # up to 1,090: none reaches 4x the median (600)
    assert long_prompt_threshold(lognormal_like) is None


def test_rows_waiting_for_their_first_token_during_a_long_prefill_are_behind_it():
    # rows: (send ms, TTFT tenths of ms, prompt); row 0 is long: its wait is 100..400 ms
    rows = [(100, 3000, 1500), (150, 500, 100), (390, 300, 100), (400, 200, 100), (20, 500, 100), (500, 10, 100),
            (120, None, 100), (130, 100, None), (200, 1000, 1600)]
    t_ms, ttft, prompt = (list(c) for c in zip(*rows, strict=True))
    hol = LongPrefills(t_ms, ttft, prompt, threshold=400)
    assert hol.count == 2  # rows 0 and 8
    # 1: sent at 150 during row 0's wait; 2: 390..420 overlaps; 3: sent at 400, the moment row 0's first token
    # came (not behind); 4: 20..70, before any; 5: after; 6: no TTFT; 7: no prompt; 0 and 8: long themselves
    assert hol.behind(range(len(rows))) == [None, True, True, False, False, False, None, None, None]
