"""The regression gate (harness/capacity/gate.py, thresholds.py, gate_report.py, ``kneecap compare --gate``) on
synthetic runs: summaries built from real sketches of seeded lognormal latencies, so their intervals are the ones
a run writes. A shift inside the noise is no detectable change, a large one regressed (or improved); levels are
matched by load; the knee's cases; thresholds parsed and refused; JUnit read back; mismatched runs refused."""

from __future__ import annotations

import json
import random
import xml.etree.ElementTree as ET

import pytest
from click.testing import CliRunner

from harness import exitcodes
from harness.analysis.knee import KneeFinding
from harness.analysis.results import RunSummary, SloVerdict
from harness.analysis.steps import GeneratorTally, StepInfo, step_result
from harness.capacity.gate import gate, mismatches
from harness.capacity.gate_report import console_lines, junit_xml, markdown
from harness.checker import Checker
from harness.cli import main
from harness.metrics.aggregate import Bucket
from harness.metrics.record import RequestRecord
from harness.metrics.sketch import Sketch
from harness.report.validate import as_summary
from harness.spec.gate import DEFAULTS, gate_from_spec, parse_threshold

TOKENS = 20


def _bucket(n: int, slower: float, seed: int, fail: int = 0) -> Bucket:
    rng, b = random.Random(seed), Bucket()
    for _ in range(n):
        ttft = 0.1 * rng.lognormvariate(0, 0.3) * slower
        e2e = ttft + (TOKENS - 1) * 0.02 * rng.lognormvariate(0, 0.1) * slower
        b.add(RequestRecord(start=0.0, ttft_s=ttft, e2e_s=e2e, chunk_times=[ttft, e2e], output_tokens=TOKENS,
                            prompt_tokens=100, prompt_tokens_target=100))
    for _ in range(fail):
        b.add(RequestRecord(start=0.0, error="http_5xx", error_detail="500"))
    return b


def _run(levels=(4, 8, 12), *, slower: float = 1.0, seed: int = 1, n: int = 2000, knee: float | None = None,
         fail: int = 0, scenario: str = "s", host: str = "http://127.0.0.1:8000", model: str = "m", **kw) -> dict:
    """A closed-loop summary.json (as the master writes it) with one step per level, ``n`` requests each."""
    lag = Sketch()
    lag.add(0.001)
    steps = []
    for i, level in enumerate(levels):
        info = StepInfo(index=i, level=level, started=10.0 * i, warmup_s=1.0, ended=10.0 * i + 9)
        r = step_result(info, _bucket(n, slower * kw.get("at", {}).get(level, 1.0), seed * 100 + i, fail),
                        GeneratorTally(lag=lag, cpu_max_pct=20.0), now=100.0)
        r.complete, r.stationary, r.slo_passed = True, True, True
        steps.append(r)
    k = KneeFinding(True, confirmed=True, step_index=list(levels).index(knee), load=knee, confidence="high") \
        if knee is not None else KneeFinding(False)
    summary = RunSummary(run_id=f"r{seed}", scenario=scenario, host=host, model=model, started_at=1.7e9,
                         ended_at=1.7e9 + 60, mode="closed", stop_reason=None, workers=1, steps=steps, knee=k,
                         knee_metric="ttft", knee_reason="why", exit_code=0,
                         slo=SloVerdict(thresholds=[], passed=None, max_load_within_slo=None))
    return json.loads(json.dumps(summary.to_json()))


def _gate(base: dict, new: dict, spec=DEFAULTS):
    return gate(as_summary(base), as_summary(new), spec)


def _decisions(result, metric: str, stat: str | None = None) -> set[str]:
    return {c.decision for c in result.checks if c.metric == metric and c.stat == stat}


# --- the rule ---------------------------------------------------------------------------------------------------


def test_same_configuration_other_seed_is_no_change():
    result = _gate(_run(seed=1), _run(seed=2))
    assert result.verdict == "passed" and not result.regressed and not result.improved
    assert result.levels == (4, 8, 12) and len(result.checks) == 3 * 12 + 1  # 9 percentiles, 2 rates, errors
    tpot = [c for c in result.checks if c.metric == "tpot" and c.stat == "p50"]
    assert all(0 < c.detectable < 0.1 for c in tpot)  # 2000 samples resolve a few percent: less than the threshold


def test_a_shift_smaller_than_the_noise_is_no_detectable_change():
    """TTFT 12% slower, 30 samples a step: its p50 (sigma 0.3) cannot tell that from noise, even where the draw
    made it look like +30%; the sentence says how large a change this pair could have detected."""
    result = _gate(_run(seed=1, n=30), _run(seed=2, n=30, slower=1.12))
    ttft = [c for c in result.checks if c.metric == "ttft" and c.stat == "p50"]
    assert {c.decision for c in ttft} == {"no detectable change"}
    c = ttft[1]
    assert c.change > 0.25 and c.detectable > c.change and "overlap; smallest detectable: +39.1%" in c.why


def test_a_large_slowdown_regresses_and_a_speedup_improves():
    slow = _gate(_run(seed=1), _run(seed=2, slower=1.25))
    assert _decisions(slow, "tpot", "p50") == {"regressed"} and _decisions(slow, "e2e", "p95") == {"regressed"}
    assert slow.verdict == "regressed"
    c = next(c for c in slow.regressed if c.metric == "tpot")
    assert c.change == pytest.approx(0.25, abs=0.03) and c.new_ci.lo > c.base_ci.hi and "+10%" in c.why
    fast = _gate(_run(seed=1, slower=1.25), _run(seed=2))
    assert _decisions(fast, "tpot", "p50") == {"improved"} and fast.verdict == "passed"


def test_p99_from_too_few_samples_detects_nothing():
    """Below 368 samples the p99's interval has no upper end: no regression of any size can be called."""
    result = _gate(_run(seed=1, n=200), _run(seed=2, n=200, slower=2.0))
    p99 = [c for c in result.checks if c.stat == "p99"]
    assert {c.decision for c in p99} == {"no detectable change"} and all(c.detectable is None for c in p99)
    assert _decisions(result, "ttft", "p50") == {"regressed"}


def test_error_rate_in_percentage_points():
    result = _gate(_run(seed=1, n=1000), _run(seed=2, n=1000, fail=60))  # 0% -> 5.7%
    c = next(c for c in result.checks if c.metric == "error_rate" and c.level == 4)
    assert c.decision == "regressed" and c.change == pytest.approx(60 / 1060) and "pp" in c.why
    small = _gate(_run(seed=1, n=1000), _run(seed=2, n=1000, fail=2))  # +0.2 pp: within +0.5%
    assert _decisions(small, "error_rate") == {"no detectable change"}


def test_levels_are_matched_by_load_whatever_the_order():
    result = _gate(_run((4, 8, 12), seed=1), _run((12, 4, 16), seed=2, at={4: 1.3}))
    assert result.levels == (4, 12)
    assert {c.level for c in result.regressed} == {4}
    assert any("only BASE ran 8 users" in n for n in result.notes)
    assert any("only NEW ran 16 users" in n for n in result.notes)


def test_mismatched_runs_are_named():
    base = as_summary(_run(host="http://127.0.0.1:41001"))
    assert mismatches(base, as_summary(_run(host="http://127.0.0.1:52002"))) == []  # the simulator's free port
    why = mismatches(base, as_summary(_run(scenario="other", model="m2", host="https://llm.example.com")))
    assert len(why) == 3 and "different scenarios ('s' vs 'other')" in why[0]


# --- the knee ---------------------------------------------------------------------------------------------------


def test_knee_one_step_lower_with_a_worse_p99_between_regresses():
    base = _run((4, 8, 12, 16), seed=1, knee=12)
    new = _run((4, 8, 12, 16), seed=2, knee=8, at={12: 1.6, 16: 1.6})
    knee = next(c for c in _gate(base, new).checks if c.metric == "knee")
    assert knee.decision == "regressed" and knee.change == -1 and "at 12 its ttft p99" in knee.why


def test_knee_one_step_lower_shown_by_the_p95_when_the_p99_is_from_too_few_samples():
    """A p99 from < 368 samples is unbounded above: the level past NEW's knee shows it in its p95 instead."""
    base = _run((4, 8, 12, 16), seed=1, n=200, knee=12)
    new = _run((4, 8, 12, 16), seed=2, n=200, knee=8, at={12: 1.6, 16: 1.6})
    knee = next(c for c in _gate(base, new).checks if c.metric == "knee")
    assert knee.decision == "regressed" and "at 12 its ttft p95" in knee.why, knee.why
    same = _gate(_run((4, 8, 12, 16), seed=1, n=200, knee=12), _run((4, 8, 12, 16), seed=2, n=200, knee=8))
    assert next(c for c in same.checks if c.metric == "knee").decision == "no detectable change"


def test_knee_move_without_evidence_is_a_boundary_not_a_regression():
    knee = next(c for c in _gate(_run(seed=1, knee=8), _run(seed=2, knee=4)).checks if c.metric == "knee")
    assert knee.decision == "no detectable change" and "boundary" in knee.why


def test_knee_in_one_run_only():
    held = next(c for c in _gate(_run(seed=1, knee=8, at={12: 1.6}), _run(seed=2)).checks if c.metric == "knee")
    assert held.decision == "improved" and "none up to 12" in held.why
    lost = next(c for c in _gate(_run(seed=1), _run(seed=2, knee=4, at={8: 1.6, 12: 1.6})).checks
                if c.metric == "knee")
    assert lost.decision == "regressed"
    short = next(c for c in _gate(_run(seed=1, knee=12), _run((4, 8), seed=2)).checks if c.metric == "knee")
    assert short.decision == "no detectable change" and "never ran past 12" in short.why
    none = next(c for c in _gate(_run(seed=1), _run(seed=2)).checks if c.metric == "knee")
    assert none.decision == "no detectable change" and "neither run" in none.why


# --- thresholds -------------------------------------------------------------------------------------------------


def test_thresholds_parse():
    assert parse_threshold("ttft", "+10%", "p99").limit == pytest.approx(0.1)
    assert parse_threshold("throughput", "10%").text == "-10%"  # no sign: the bad way
    assert parse_threshold("error_rate", "+0.5%").unit == "points"
    assert parse_threshold("error_rate", "0.5pp").limit == pytest.approx(0.005)
    knee = parse_threshold("knee", "-1 step")
    assert (knee.unit, knee.limit, knee.text) == ("steps", 1.0, "-1 step")
    assert parse_threshold("knee", "-15%").unit == "relative"


@pytest.mark.parametrize(("metric", "text", "says"), [
    ("ttft", "10", 'expected a change such as "+10%"'),
    ("ttft", "-10%", "ttft regresses by an increase: write +10%"),
    ("throughput", "+5%", "write -5%"),
    ("ttft", "+1 step", 'ttft takes "+10%"'),
    ("knee", "-1 stp", '"-1 step" or "-10%"'),
    ("goodput", "-100%", "impossible"),
    ("error_rate", "+150%", "at most 100%"),
    ("latency", "+10%", "unknown gate metric 'latency'"),
    ("ttft", 10, "got int 10"),
])
def test_bad_threshold_strings_say_what_is_expected(metric, text, says):
    with pytest.raises(ValueError, match=None) as exc:
        parse_threshold(metric, text)
    assert says in str(exc.value)


def test_gate_block_reports_every_problem_with_its_path():
    check = Checker()
    spec = gate_from_spec({"ttft": {"p99": "+20%", "p98": "+5%"}, "knee": "-2 steps", "tpot": "off",
                           "throughput": "+10%", "eror_rate": "1%"}, "gate", check)
    assert check.problems == ["gate: unknown key 'eror_rate'; did you mean 'error_rate'?",
                              "gate.ttft: unknown key 'p98'; did you mean 'p99'?",
                              "gate.throughput: throughput regresses by a decrease: write -10%, got '+10%' (the "
                              "gate judges both ways; the sign names the bad one)"]
    assert spec.get("ttft", "p99").limit == pytest.approx(0.2) and spec.get("ttft", "p50").text == "+10%"
    assert spec.get("tpot", "p50") is None and spec.get("knee").limit == 2


# --- reports and the command ------------------------------------------------------------------------------------


def test_junit_parses_back_with_one_case_per_check_and_a_failure_per_regression():
    result = _gate(_run(seed=1, n=300), _run(seed=2, n=300, slower=1.3))
    root = ET.fromstring(junit_xml(result, "base", "new"))
    cases = root.findall("./testsuite/testcase")
    assert len(cases) == len(result.checks) and root.get("tests") == str(len(result.checks))
    failed = [c for c in cases if c.find("failure") is not None]
    assert len(failed) == len(result.regressed) == int(root.get("failures")) > 0
    assert {c.get("name") for c in failed} >= {"tpot p50 @ 8 users"}
    assert root.get("skipped") == str(sum(c.find("skipped") is not None for c in cases)) != "0"  # p99 of 300
    text = markdown(result, "base", "new")
    assert text.startswith("## kneecap gate: ❌ regressed") and "| tpot p50 @ 8 users |" in text
    lines = console_lines(result)
    assert lines[-1].startswith("gate: REGRESSED") and all(not ln.startswith("NO DETECTABLE") for ln in lines)


def _folders(tmp_path, **runs: dict) -> list[str]:
    out = []
    for name, data in runs.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "summary.json").write_text(json.dumps(data))
        out.append(str(tmp_path / name))
    return out


def test_compare_gate_exit_codes_and_files(tmp_path):
    base, same, slow = _folders(tmp_path, base=_run(seed=1, n=400), same=_run(seed=2, n=400),
                                slow=_run(seed=3, n=400, slower=1.3))
    runner = CliRunner()
    ok = runner.invoke(main, ["compare", base, same, "--gate"])
    assert ok.exit_code == exitcodes.OK, ok.output
    assert ok.output.strip().splitlines()[-1].startswith("gate: PASSED")
    junit, md = tmp_path / "gate.xml", tmp_path / "gate.md"
    bad = runner.invoke(main, ["compare", base, slow, "--gate", "--junit", str(junit), "--markdown", str(md)])
    assert bad.exit_code == exitcodes.REGRESSED == 6, bad.output
    assert bad.output.startswith("REGRESSED: ") and ET.parse(junit).getroot().get("failures") != "0"
    assert "❌ regressed" in md.read_text(encoding="utf-8")


def test_compare_gate_refuses_mismatched_runs_unless_forced(tmp_path):
    base, other = _folders(tmp_path, base=_run(seed=1, n=200), other=_run(seed=2, n=200, model="m2", scenario="t"))
    runner = CliRunner()
    refused = runner.invoke(main, ["compare", base, other, "--gate"])
    assert refused.exit_code == exitcodes.USAGE
    assert "different scenarios ('s' vs 't'); different models ('m' vs 'm2')" in refused.output
    assert "--force" in refused.output and "Traceback" not in refused.output
    forced = runner.invoke(main, ["compare", base, other, "--gate", "--force"])
    assert forced.exit_code == exitcodes.OK, forced.output


def test_compare_gate_reads_the_scenario_gate_block(tmp_path):
    base, new = _folders(tmp_path, base=_run(seed=1, n=400), new=_run(seed=2, n=400, slower=1.3))
    loose = tmp_path / "s.yaml"
    loose.write_text('name: s\nworkload: {input_tokens: 5, output_tokens: 5}\n'
                     'gate: {ttft: "+50%", tpot: "+50%", e2e: "+50%", throughput: off, goodput: off}\n')
    result = CliRunner().invoke(main, ["compare", base, new, "--gate", "--scenario", str(loose)])
    assert result.exit_code == exitcodes.OK, result.output
    broken = tmp_path / "b.yaml"
    broken.write_text('name: s\nworkload: {input_tokens: 5, output_tokens: 5}\ngate: {ttft: {p99: "10"}}\n')
    result = CliRunner().invoke(main, ["compare", base, new, "--gate", "--scenario", str(broken)])
    assert result.exit_code == exitcodes.USAGE and "gate.ttft.p99: expected a change" in result.output


def test_compare_gate_baseline_is_the_newest_labelled_run_of_the_scenario(tmp_path):
    old, base, other, new = _folders(tmp_path, old=_run(seed=1, n=400, slower=1.5), base=_run(seed=2, n=400),
                                     other=_run(seed=3, n=400, scenario="t"), new=_run(seed=4, n=400))
    lines = [{"kind": "run", "path": old, "scenario": "s", "labels": {"env": "prod"}},
             {"kind": "run", "path": base, "scenario": "s", "labels": {"env": "prod"}},
             {"kind": "run", "path": other, "scenario": "t", "labels": {"env": "prod"}},
             {"kind": "run", "path": new, "scenario": "s", "labels": {"env": "prod"}}]  # NEW itself: never BASE
    (tmp_path / "index.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    runner = CliRunner()
    ok = runner.invoke(main, ["compare", new, "--gate", "--baseline", "env=prod", "--results", str(tmp_path)])
    assert ok.exit_code == exitcodes.OK and f"baseline: {base}" in ok.output, ok.output
    none = runner.invoke(main, ["compare", new, "--gate", "--baseline", "env=dev", "--results", str(tmp_path)])
    assert none.exit_code == exitcodes.USAGE and "no run of scenario 's' labelled env=dev" in none.output
    two = runner.invoke(main, ["compare", base, new, "--gate", "--baseline", "env=prod", "--results", str(tmp_path)])
    assert two.exit_code == exitcodes.USAGE and "give NEW's folder alone" in two.output


def test_compare_gate_usage_errors(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # where a default compare.html would land
    a, b, c = _folders(tmp_path, a=_run(seed=1, n=50), b=_run(seed=2, n=50), c=_run(seed=3, n=50))
    runner = CliRunner()
    three = runner.invoke(main, ["compare", a, b, c, "--gate"])
    assert three.exit_code == exitcodes.USAGE and "exactly two runs" in three.output
    loose = runner.invoke(main, ["compare", a, b, "--junit", str(tmp_path / "x.xml")])
    assert loose.exit_code == exitcodes.USAGE and "go with --gate" in loose.output
    opened = runner.invoke(main, ["compare", a, b, "--gate"])  # no overlay page unless --out asks
    assert opened.exit_code == exitcodes.OK and not (tmp_path / "compare.html").exists()


def test_the_generator_lag_lowers_the_low_end_of_a_one_chunk_latency():
    """TTFT and E2E are stamped late by up to the reader's lag (1 ms in these runs); TPOT spreads it over tokens."""
    from harness.capacity.intervals import latency_interval

    step = as_summary(_run(seed=1, n=400)).steps[0]
    ttft, tpot = step.latency_ms["ttft"], step.latency_ms["tpot"]
    lagged = latency_interval("ttft", ttft, "p95", 5.0)
    plain = latency_interval("ttft", ttft, "p95", None)
    assert lagged.lo == pytest.approx(plain.lo - 5.0) and lagged.hi == plain.hi
    assert latency_interval("tpot", tpot, "p95", 5.0) == latency_interval("tpot", tpot, "p95", None)


def test_a_summary_from_before_p50_ci_says_so():
    old = _run(seed=1, n=400)
    for step in old["steps"]:
        for stats in step["latency_ms"].values():
            stats.pop("p50_ci", None)
    c = next(c for c in _gate(old, _run(seed=2, n=400)).checks if c.metric == "tpot" and c.stat == "p50")
    assert c.decision == "no detectable change" and c.detectable is None
    assert "BASE's summary.json has no p50_ci (written before kneecap kept it)" in c.why
