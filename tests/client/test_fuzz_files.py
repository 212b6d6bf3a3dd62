"""The files a user hands kneecap, mutated: scenarios (``load_scenario``) and production logs (``kneecap fit`` over the
token, timestamp and session-log readers). A bad file is an error naming it, never a traceback
(``tests/kit/fuzz_files.py``; ``benchmarks/fuzz_parsers.py`` runs many more). Then the defects fuzzing found.
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from harness.cli import main
from harness.scenario import ScenarioError, load_scenario
from harness.workload.session_log import load_session_log
from harness.workload.traces import TraceError, read_columns, read_timestamps
from tests.kit.fuzz_files import check_log, check_scenario, log_case, scenario_case, scenario_dir, seed_scenarios


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> str:
    path = str(tmp_path_factory.mktemp("fuzz"))
    scenario_dir(path)
    return path


@pytest.mark.parametrize("batch", range(2))
def test_mutated_scenarios_are_a_scenario_error_or_a_scenario(batch, folder):
    seeds = seed_scenarios()
    problems = {s: p for s in range(batch * 60, (batch + 1) * 60)
                if (p := check_scenario(*scenario_case(s, seeds), folder)) is not None}
    assert problems == {}


@pytest.mark.parametrize("batch", range(2))
def test_mutated_logs_are_fitted_or_refused_with_exit_2(batch, folder):
    runner = CliRunner()
    problems = {s: p for s in range(batch * 300, (batch + 1) * 300)
                if (p := check_log(*log_case(s), folder, runner)) is not None}
    assert problems == {}


def test_the_corpus_is_not_vacuous(folder):
    """Both outcomes happen: some mutated files still load, most are refused."""
    seeds = seed_scenarios()
    loaded = 0
    for s in range(30):
        data, overrides = scenario_case(s, seeds)
        with open(f"{folder}/scenario.yaml", "wb") as f:
            f.write(data)
        try:
            load_scenario(f"{folder}/scenario.yaml", overrides or None)
            loaded += 1
        except ScenarioError:
            pass
    assert 0 < loaded < 30
    codes = set()
    for name, data in map(log_case, range(30)):
        with open(f"{folder}/{name}", "wb") as f:
            f.write(data)
        codes.add(CliRunner().invoke(main, ["fit", f"{folder}/{name}"]).exit_code)
    assert codes == {0, 2}


# -- defects the fuzzer found -------------------------------------------------------------------------------------

def test_fuzz_case_scenario_34_deeply_nested_yaml_is_a_scenario_error(folder):
    """Scenario seed 34: a value of 600 nested [ ]; PyYAML's recursion escaped load_scenario as a RecursionError
    (a traceback from ``kneecap run``)."""
    problem = check_scenario(*scenario_case(34, seed_scenarios()), folder)
    assert problem is None
    with open(f"{folder}/deep.yaml", "w") as f:
        f.write("name: x\nworkload: " + "[" * 600 + "]" * 600 + "\n")
    with pytest.raises(ScenarioError, match="nested too deep"):
        load_scenario(f"{folder}/deep.yaml")


def test_fuzz_case_log_1359_a_deeply_nested_json_line_is_a_trace_error(tmp_path):
    """Log seed 1359: a JSON line of 5,000 [ raised RecursionError out of the log reader."""
    assert check_log(*log_case(1359), str(tmp_path)) is None
    path = tmp_path / "log.jsonl"
    path.write_text('{"prompt_tokens": 1, "completion_tokens": 2}\n' + "[" * 5000 + "\n")
    with pytest.raises(TraceError, match=r"log.jsonl:2: invalid JSON \(nested too deep"):
        read_columns(str(path), ["prompt_tokens", "completion_tokens"])


@pytest.mark.parametrize("cell", ["1" * 400, "1e308", "1e10"])
def test_fuzz_case_log_917_and_1705_a_token_count_out_of_range_is_a_trace_error(tmp_path, cell):
    """Log seed 917: a JSON integer of 400 digits made float() raise OverflowError; seed 1705: 1e308 tokens passed
    and overflowed the fit's moments (``mean**2``). Counts are now bounded (``traces.MAX_TOKENS``)."""
    assert check_log(*log_case(917), str(tmp_path)) is None and check_log(*log_case(1705), str(tmp_path)) is None
    path = tmp_path / "log.jsonl"
    path.write_text(f'{{"prompt_tokens": 5, "completion_tokens": 2}}\n'
                    f'{{"prompt_tokens": {cell}, "completion_tokens": 2}}\n')
    with pytest.raises(TraceError, match=r"log.jsonl:2: column 'prompt_tokens' is .*expected a .*count"):
        read_columns(str(path), ["prompt_tokens", "completion_tokens"])
    rows = [{"session_id": "a", "input_tokens": 5, "output_tokens": 1}, {"session_id": "a", "input_tokens": cell,
                                                                         "output_tokens": 1}]
    path.write_text("".join(json.dumps(r).replace(f'"{cell}"', cell) + "\n" for r in rows))
    with pytest.raises(TraceError, match="expected a token count"):
        load_session_log(str(path))


def test_fuzz_case_a_timestamp_with_5000_fraction_digits_is_read(tmp_path):
    """A start time with 5,000 fractional digits (from the fuzzer's cells): ``int(frac)`` raised ValueError past
    Python's 4,300-digit limit, out of ``load_session_log`` (``kneecap fit`` caught only TraceError)."""
    stamp = "2024-05-01T10:00:03." + "9" * 5000 + "Z"
    path = tmp_path / "s.jsonl"
    path.write_text(f'{{"session_id":"a","input_tokens":5,"output_tokens":3,"timestamp":"{stamp}"}}\n'
                    '{"session_id":"a","input_tokens":50,"output_tokens":3,"timestamp":"2024-05-01T10:00:05Z"}\n')
    log = load_session_log(str(path))
    assert log.scripts[0][1].think_s == pytest.approx(1.0)
    csv = tmp_path / "t.csv"
    csv.write_text(f"TIMESTAMP\n{stamp.replace('Z', '')}\n2024-05-01T10:00:05\n")
    a, b = read_timestamps(str(csv), "TIMESTAMP")
    assert b - a == pytest.approx(1.0)


@pytest.mark.parametrize("seed", [8851, 11489])
def test_fuzz_case_scenario_8851_and_11489_are_scenario_errors(seed, folder):
    """Scenario seed 8851: an invalid load.knee.metric left None behind and ``None.startswith`` raised
    AttributeError; 11489: a mixture weight of 400 digits overflowed the weights' sum (OverflowError)."""
    assert check_scenario(*scenario_case(seed, seed_scenarios()), folder) is None
    with open(f"{folder}/mix.yaml", "w") as f:
        f.write("name: x\nworkload:\n  input_tokens: {dist: mixture, components: [{weight: 1" + "0" * 400 +
                ", dist: fixed, value: 5}]}\n  output_tokens: {dist: fixed, value: 5}\n"
                "load: {knee: {metric: nope}}\n")
    with pytest.raises(ScenarioError) as err:
        load_scenario(f"{folder}/mix.yaml")
    assert any("weight: must be <=" in p for p in err.value.problems)
    assert any("load.knee.metric: must be one of" in p for p in err.value.problems)
