"""What the simulator serves (``harness/sim/models.py``): flag specs, engines per model, routes, /v1/models cards,
and the command line's refusals (in-process, nothing binds a socket)."""

from __future__ import annotations

import dataclasses

import pytest
from click.testing import CliRunner

import harness.cli
from harness.cli import main
from harness.sim.engine import EngineConfig
from harness.sim.models import (
    Adapter,
    Route,
    ServedModel,
    deployments,
    lora_count,
    model_cards,
    parse_lora,
    problems,
    routes,
)
from harness.sim.presets import PRESETS


@pytest.mark.parametrize("spec,parsed", [
    ("fast:4", ServedModel("fast", 4.0)),
    ("fast:2.5", ServedModel("fast", 2.5)),
    ("fast", ServedModel("fast")),
    ("llama3:8b", ServedModel("llama3:8b")),  # not a number after the colon: part of the name
    ("llama3:8b:12", ServedModel("llama3:8b", 12.0)),
    ("meta-llama/Llama-3-8B:30", ServedModel("meta-llama/Llama-3-8B", 30.0)),
    ("odd:-1", ServedModel("odd", -1.0)),  # refused later, by the engine's own check
])
def test_serve_model_spec(spec, parsed):
    assert ServedModel.parse(spec) == parsed


@pytest.mark.parametrize("spec", ["", ":4", "  "])
def test_serve_model_spec_without_a_name_is_refused(spec):
    with pytest.raises(ValueError, match="expected NAME"):
        ServedModel.parse(spec)


def test_lora_specs():
    assert parse_lora("sql") == Adapter("sql")
    assert parse_lora("sql@fast") == Adapter("sql", "fast")
    for bad in ("", "@fast", "sql@"):
        with pytest.raises(ValueError, match="expected NAME or NAME@BASE"):
            parse_lora(bad)
    assert lora_count(3) == (Adapter("lora-0"), Adapter("lora-1"), Adapter("lora-2")) and lora_count(0) == ()


def test_each_served_model_gets_the_engine_flags_with_its_own_iteration_cost():
    tiny = PRESETS["tiny"]
    assert deployments("sim-tiny", tiny, ()) == {"sim-tiny": tiny}
    got = deployments("ignored", tiny, (ServedModel("fast", 1.0), ServedModel("same")))
    assert list(got) == ["fast", "same"]
    assert got["fast"] == dataclasses.replace(tiny, iter_base_ms=1.0) and got["same"] == tiny


def test_routes_put_adapters_on_their_base_or_the_first_model():
    got = routes(["fast", "slow"], (Adapter("a"), Adapter("b", "slow")))
    assert got == {"fast": Route("fast"), "slow": Route("slow"), "a": Route("fast", "a"), "b": Route("slow", "b")}


def test_model_cards_have_vllm_shape_with_parents():
    cards = model_cards({"fast": PRESETS["tiny"], "slow": PRESETS["tiny"]}, (Adapter("a"), Adapter("b", "slow")), 7)
    assert [(c["id"], c["parent"], c["max_model_len"]) for c in cards] == [
        ("fast", None, 4096), ("slow", None, 4096), ("a", "fast", None), ("b", "slow", None)]
    assert all(c["object"] == "model" and c["created"] == 7 and c["root"] == c["id"] for c in cards)


def test_problems_name_every_mistake_at_once():
    served = (ServedModel("fast", -0.1), ServedModel("slow"), ServedModel("slow"))
    loras = (Adapter("fast"), Adapter("x", "nowhere"))
    got = problems(served, loras, model="m", model_flag=True, engine=EngineConfig())
    assert got == [
        "--serve-model fast:-0.1: iter_base_ms must be >= 0, got -0.1",
        "--model 'm' and --serve-model both name the served models; give every name with --serve-model",
        "served model and adapter names must be unique; repeated: fast, slow",
        "--lora x@nowhere: no served model 'nowhere' (served: fast, slow, slow)",
    ]
    assert problems((), (Adapter("a", "sim-tiny"),), model="sim-tiny", model_flag=False, engine=EngineConfig()) == []


@pytest.fixture
def served(monkeypatch):
    got = []
    monkeypatch.setattr(harness.cli, "run_sim", lambda config, host, port: got.append(config))

    def invoke(*args: str):
        result = CliRunner().invoke(main, ["sim", *args], prog_name="kneecap")
        return result, (got.pop() if got else None)
    return invoke


def test_flags_reach_the_config(served):
    result, config = served("--preset", "tiny", "--serve-model", "fast:1", "--serve-model", "slow",
                            "--lora", "a@slow", "--lora-count", "2", "--max-loras", "3", "--lora-load-ms", "50")
    assert result.exit_code == 0, result.output
    assert config.served == (ServedModel("fast", 1.0), ServedModel("slow"))
    assert config.loras == (Adapter("a", "slow"), Adapter("lora-0"), Adapter("lora-1"))
    assert (config.engine.max_loras, config.engine.lora_load_ms) == (3, 50.0)
