"""``kneecap fit`` statistics, and prompt calibration (pure, then against the real simulator)."""

from __future__ import annotations

import http.client
import json
import math
import random

import pytest
from click.testing import CliRunner

from harness.cli import main
from harness.workload.fit import _gamma_p, fit_log, ks_distance
from harness.workload.prompts import PromptBuilder
from harness.workload.sampler import worker_rng
from tests.kit.sim import start_sim

TRACE = "scenarios/traces/azure-code-2023.csv"


def test_gamma_p_matches_known_values():
    # P(1, x) = 1 - e^-x ; P(0.5, x) = erf(sqrt(x))
    for x in (0.1, 1.0, 3.0, 10.0):
        assert _gamma_p(1.0, x) == pytest.approx(1 - math.exp(-x), abs=1e-9)
        assert _gamma_p(0.5, x) == pytest.approx(math.erf(math.sqrt(x)), abs=1e-9)


def test_ks_distance_small_for_the_true_model_large_for_a_wrong_one():
    rng = random.Random(1)
    data = [rng.gauss(0, 1) for _ in range(4000)]
    normal = lambda x: 0.5 * (1 + math.erf(x / math.sqrt(2)))  # noqa: E731
    assert ks_distance(data, normal) < 0.03
    assert ks_distance(data, lambda x: normal(x - 0.5)) > 0.15


def test_fit_prefers_the_generating_family():
    rng = random.Random(2)
    inputs = [max(1, round(rng.lognormvariate(6, 0.7))) for _ in range(6000)]
    outputs = [max(1, round(v / 10 + rng.gauss(0, 5))) for v in inputs]
    f = fit_log("in", inputs, "out", outputs)
    assert f.input.best_parametric == "lognormal" and f.input.ks["lognormal"] < 0.03
    assert f.input.params["lognormal"]["median"] == pytest.approx(math.exp(6), rel=0.05)
    assert f.spearman > 0.9


def test_fit_cli_on_the_shipped_trace(tmp_path):
    out = tmp_path / "w.yaml"
    result = CliRunner().invoke(main, ["fit", TRACE, "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "ContextTokens: n=8819" in result.output and "GeneratedTokens: n=8819" in result.output
    assert "joint: {file: " in out.read_text()


def test_fit_cli_reads_jsonl_and_guesses_openai_names(tmp_path):
    log = tmp_path / "log.jsonl"
    rng = random.Random(3)
    log.write_text("".join(json.dumps({"prompt_tokens": rng.randint(10, 900), "completion_tokens": rng.randint(1, 90)})
                           + "\n" for _ in range(300)))
    result = CliRunner().invoke(main, ["fit", str(log)])
    assert result.exit_code == 0 and "prompt_tokens: n=300" in result.output


def test_calibration_converges_on_a_linear_tokenizer():
    builder = PromptBuilder(api="chat", seed=1)
    rng = random.Random(4)
    errors = []
    for i in range(60):
        target = rng.randint(50, 3000)
        p = builder.build(target, rng)
        reported = round(p.words * 1.3) + 11  # a tokenizer that splits words and adds a template
        builder.observe(p, reported)
        if i >= 20:
            errors.append(abs(reported - target) / target)
    assert max(errors) < 0.01


def test_shared_prefix_is_identical_and_nonce_unique():
    builder = PromptBuilder(api="completions", shared_prefix_tokens=200, seed=1)
    rng = random.Random(5)
    a, b = builder.build(500, rng), builder.build(500, rng)
    assert a.text.startswith(builder.shared_prefix) and b.text.startswith(builder.shared_prefix)  # same prefix
    assert len(builder.shared_prefix.split()) == 200
    assert a.text.split()[200] != b.text.split()[200]  # ... then a unique nonce
    assert len(a.text.split()) == 500


@pytest.mark.integration
@pytest.mark.parametrize("api", ["chat", "completions"])
def test_calibration_against_the_simulator(api):
    """Achieved prompt length within 1% of the target after 10 requests (the simulator's own count)."""
    builder = PromptBuilder(api=api, shared_prefix_tokens=100, seed=2)
    rng = worker_rng(1, 0, "prompts")
    errors = []
    with start_sim("--preset", "tiny", "--tokens-per-word", "1.25") as sim:
        conn = http.client.HTTPConnection(sim.host, sim.port, timeout=10)
        for i in range(30):
            target = rng.randint(150, 3000)
            p = builder.build(target, rng)
            body = {"model": "sim-tiny", "max_tokens": 1}
            body.update({"messages": p.messages} if api == "chat" else {"prompt": p.text})
            conn.request("POST", f"/v1/{'chat/' if api == 'chat' else ''}completions", json.dumps(body))
            usage = json.loads(conn.getresponse().read())["usage"]
            builder.observe(p, usage["prompt_tokens"])
            if i >= 10:
                errors.append(abs(usage["prompt_tokens"] - target) / target)
    assert max(errors) < 0.01, errors
