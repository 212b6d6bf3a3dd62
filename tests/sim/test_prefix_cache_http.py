"""The prefix cache through the real simulator: a two-turn chat hits on turn 2 as the trace says, /metrics counts
what the trace sums, hits cut the time to first token, and ``--prefix-cache off`` leaves the usage details out."""

from __future__ import annotations

import hashlib
import json

import pytest
from click.testing import CliRunner

from harness.cli import main
from tests.kit.sim import start_sim
from tests.kit.sim_http import CHAT, events, post, scrape

SYSTEM = {"role": "system", "content": " ".join(f"rule{i}" for i in range(60))}


def turn(sim, messages: list[dict], max_tokens: int = 30, stream: bool = True) -> tuple[str, dict]:
    """One chat request; returns the answer as a client assembles it and the usage object."""
    body = {"model": "sim-tiny", "messages": messages, "max_tokens": max_tokens, "ignore_eos": True}
    if stream:
        body.update(stream=True, stream_options={"include_usage": True})
    _, resp = post(sim, CHAT, body)
    assert resp.status == 200
    if not stream:
        out = json.loads(resp.read())
        return out["choices"][0]["message"]["content"], out["usage"]
    chunks = [json.loads(e[6:]) for e in events(resp.read())[:-1]]
    answer = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
    return answer, chunks[-1]["usage"]


def sha16(role: str, text: str) -> str:
    return hashlib.sha1(f"{role}\x00{text}".encode()).hexdigest()[:16]


@pytest.mark.integration
def test_second_turn_hits_what_the_first_computed_and_metrics_match_the_trace(tmp_path):
    trace = tmp_path / "trace.jsonl"
    with start_sim("--preset", "tiny", "--trace-file", str(trace)) as sim:
        history = [SYSTEM, {"role": "user", "content": " ".join(f"ask{i}" for i in range(20))}]
        answer, usage1 = turn(sim, history)
        second = [*history, {"role": "assistant", "content": answer}, {"role": "user", "content": "go on please"}]
        _, usage2 = turn(sim, second)
        _, usage3 = turn(sim, [*second, {"role": "assistant", "content": answer}, {"role": "user", "content": "x"}],
                         stream=False)
        metrics = scrape(sim)
    rows = [json.loads(line) for line in trace.read_text().splitlines()]
    assert usage1["prompt_tokens"] == 3 + (4 + 60) + (4 + 20) == 91
    assert usage1["prompt_tokens_details"] == {"cached_tokens": 0}
    # Turn 1 computed 91 + 30 - 1 tokens (the last sampled token has no KV yet): 7 full blocks of 16.
    assert usage2["prompt_tokens_details"]["cached_tokens"] == 7 * 16
    assert usage3["prompt_tokens_details"]["cached_tokens"] > 7 * 16
    assert [r["cached_tokens"] for r in rows] == [0, 112, usage3["prompt_tokens_details"]["cached_tokens"]]
    assert [r["prompt_tokens"] for r in rows] == [usage1["prompt_tokens"], usage2["prompt_tokens"],
                                                  usage3["prompt_tokens"]]
    one, two = rows[0]["message_hashes"], rows[1]["message_hashes"]
    assert two[:len(one)] == one and two[len(one)] == sha16("assistant", answer)
    assert one == [sha16(m["role"], m["content"]) for m in history]
    assert metrics["vllm:prefix_cache_queries_total"] == sum(r["prompt_tokens"] for r in rows)
    assert metrics["vllm:prefix_cache_hits_total"] == sum(r["cached_tokens"] for r in rows)


@pytest.mark.integration
def test_a_hit_cuts_the_time_to_first_token(tmp_path):
    trace = tmp_path / "trace.jsonl"
    long_system = {"role": "system", "content": " ".join(f"fact{i}" for i in range(1500))}
    with start_sim("--preset", "tiny", "--prefill-per-ktoken-ms", "100", "--trace-file", str(trace)) as sim:
        answer, _ = turn(sim, [long_system, {"role": "user", "content": "q"}], max_tokens=3)
        turn(sim, [long_system, {"role": "user", "content": "q"}, {"role": "assistant", "content": answer},
                   {"role": "user", "content": "and"}], max_tokens=3)
    miss, hit = (json.loads(line) for line in trace.read_text().splitlines())
    assert hit["cached_tokens"] >= 1500
    # Server side: 1512 tokens prefilled at 100 ms per 1000 against the 20 after the 1504 cached.
    assert miss["first_token"] - miss["admitted"] > 0.14
    assert hit["first_token"] - hit["admitted"] < 0.07


@pytest.mark.integration
def test_with_the_cache_off_usage_has_no_details_and_metrics_no_prefix_counters(tmp_path):
    trace = tmp_path / "trace.jsonl"
    with start_sim("--preset", "tiny", "--prefix-cache", "off", "--trace-file", str(trace)) as sim:
        history = [SYSTEM, {"role": "user", "content": "hello"}]
        answer, usage = turn(sim, history, max_tokens=3)
        _, resp = post(sim, CHAT, {"model": "sim-tiny", "messages": [*history, {"role": "assistant",
                       "content": answer}], "max_tokens": 2, "ignore_eos": True, "stream": True,
                                   "stream_options": {"include_usage": True}})
        last = events(resp.read())[-2].decode()
        _, full = turn(sim, history, max_tokens=2, stream=False)
        metrics = scrape(sim)
    assert usage == {"prompt_tokens": 72, "total_tokens": 75, "completion_tokens": 3}
    assert last.endswith('"choices":[],"usage":{"prompt_tokens":79,"total_tokens":81,"completion_tokens":2}}')
    assert "prompt_tokens_details" not in full
    assert not any(name.startswith("vllm:prefix_cache") for name in metrics)
    assert [json.loads(line)["cached_tokens"] for line in trace.read_text().splitlines()] == [None, None, None]


def test_a_bad_prefix_cache_value_is_a_usage_error():
    result = CliRunner().invoke(main, ["sim", "--prefix-cache", "maybe"], prog_name="kneecap")
    assert result.exit_code == 2 and "'maybe' is not one of 'on', 'off'" in result.output
