"""Scenarios more than one test module runs: the chat scenario against the tiny simulator and its staircase; a small
scenario whose workload a validation test extends (``parse_with``).

The simulator's knee is analytical: with fixed lengths and S slots, TTFT is flat up to S closed-loop users and
jumps beyond (README, "Where the knee is"); ``STAIRS`` climbs past 8 slots.
"""

from __future__ import annotations

import pathlib
import textwrap

import yaml

from harness.scenario import Scenario, parse_scenario
from tests.kit.run import write_scenario

__all__ = ["SMALL", "STAIRS", "parse_with", "scenario"]

STAIRS = """
load:
  users: {start: 2, step: 2, max: 16}
  step: {warmup_s: 0.5, min_duration_s: 2, min_requests: 60, max_duration_s: 5}
"""

_CHAT = textwrap.dedent("""
    name: run-test
    endpoint: {api: chat, model: sim-tiny, timeouts: {ttft_s: 20, idle_s: 10}}
    workload: {input_tokens: 100, output_tokens: 20}
""")


def scenario(tmp_path: pathlib.Path, load: str, slo: str = "") -> pathlib.Path:
    """``tmp_path/s.yaml``: chat with fixed lengths (100 in, 20 out) on ``sim-tiny``, then ``load`` and ``slo``."""
    return write_scenario(tmp_path, _CHAT + load + slo)


SMALL = """
name: small
endpoint: {api: chat, model: m}
workload:
  input_tokens: 100
  output_tokens: 50
"""


def parse_with(workload_extra: str = "", *, text: str = SMALL, endpoint: str = "") -> Scenario:
    """``text`` parsed, its workload and endpoint updated with the YAML mappings given (``ScenarioError`` with every
    problem when it is refused)."""
    node = yaml.safe_load(text)
    node["workload"].update(yaml.safe_load(workload_extra) or {})
    node["endpoint"].update(yaml.safe_load(endpoint) or {})
    return parse_scenario(node)
