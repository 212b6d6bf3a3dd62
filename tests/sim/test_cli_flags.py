"""``kneecap sim`` flags come from the simulator's dataclass fields: same names, same defaults, every flag reaches
its field. In-process (CliRunner), with the server replaced by a stub that records the config it was given."""

from __future__ import annotations

import dataclasses

import pytest
from click.testing import CliRunner

import harness.cli
from harness.cli import main
from harness.sim import EngineConfig, FaultConfig, OutputPolicy, SimConfig
from harness.sim.plan import Behavior
from harness.sim.presets import DEFAULT_PRESET, PRESETS

MIB = 1 << 20

# flag -> (dataclass, field, field units per flag unit, the flag's default as users know it)
FIELD_FLAGS = {
    "--eos-median": (OutputPolicy, "eos_median", 1, 256.0),
    "--eos-sigma": (OutputPolicy, "eos_sigma", 1, 0.6),
    "--tokens-per-word": (OutputPolicy, "tokens_per_word", 1, 1.0),
    "--reasoning-tokens": (Behavior, "reasoning_tokens", 1, "0"),
    "--reasoning-field": (Behavior, "reasoning_field", 1, "reasoning_content"),
    "--reasoning-usage": (Behavior, "reasoning_usage", 1, "off"),
    "--tool-call-p": (Behavior, "tool_call_p", 1, 0.0),
    "--strict-stream-options": (Behavior, "strict_stream_options", 1, "off"),
    "--embedding-dim": (Behavior, "embedding_dim", 1, 16),
    "--timings": (Behavior, "timings", 1, "off"),
    "--image-patch-px": (Behavior, "image_patch_px", 1, 28),
    "--stall-s": (FaultConfig, "stall_s", 1, 5.0),
    "--long-line-bytes": (FaultConfig, "long_line_bytes", 1, 1 << 20),
    "--retry-after-s": (FaultConfig, "retry_after_s", 1, 1),
    "--max-waiting": (SimConfig, "max_waiting", 1, None),
    "--max-body-mb": (SimConfig, "max_body_bytes", MIB, 8.0),
    "--trace-file": (SimConfig, "trace_file", 1, None),
    "--seed": (SimConfig, "seed", 1, 0),
    "--close-after-p": (SimConfig, "close_after_p", 1, 0.0),
    "--accept-delay-ms": (SimConfig, "accept_delay_ms", 1, 0.0),
}


def _options() -> dict[str, object]:
    return {opt: p for p in main.commands["sim"].params for opt in p.opts}


def _field_default(cls: type, name: str) -> object:
    return next(f.default for f in dataclasses.fields(cls) if f.name == name)


@pytest.fixture
def served(monkeypatch):
    """Invoke ``kneecap sim ARGS``; returns the SimConfig it would serve (nothing binds a socket)."""
    got: list[SimConfig] = []
    monkeypatch.setattr(harness.cli, "run_sim", lambda config, host, port: got.append(config))

    def invoke(*args: str) -> SimConfig:
        result = CliRunner().invoke(main, ["sim", *args], prog_name="kneecap")
        assert result.exit_code == 0, result.output
        assert len(got) == 1
        return got.pop()
    return invoke


@pytest.mark.parametrize("flag", sorted(FIELD_FLAGS))
def test_flag_default_is_the_dataclass_default(flag):
    cls, name, scale, known = FIELD_FLAGS[flag]
    field_default = _field_default(cls, name)
    option = _options()[flag]
    assert option.default == known  # the flag's default did not change
    assert option.default == (field_default if field_default is None or scale == 1 else field_default / scale)
    assert option.help == next(f.metadata["help"] for f in dataclasses.fields(cls) if f.name == name)


def test_engine_flags_leave_the_preset_alone():
    options = _options()
    for f in dataclasses.fields(EngineConfig):
        flag = f"--{f.name.replace('_', '-')}"
        if f.name == "seed":  # --seed is SimConfig's, and also seeds the engine
            continue
        assert options[flag].default is None and options[flag].help.endswith(" [preset]"), flag


def test_no_flags_serve_the_dataclass_defaults(served):
    config = served()
    assert config == SimConfig(engine=dataclasses.replace(PRESETS[DEFAULT_PRESET], seed=0),
                               model=f"sim-{DEFAULT_PRESET}")


def test_every_flag_reaches_its_field(served, tmp_path):
    trace = str(tmp_path / "t.jsonl")
    engine = {"max_num_seqs": 3, "kv_cache_tokens": 9000, "block_size": 8, "max_num_batched_tokens": 512,
              "max_model_len": 4096, "iter_base_ms": 1.5, "iter_per_seq_ms": 0.25, "iter_per_kv_ktoken_ms": 0.5,
              "prefill_per_ktoken_ms": 20.0, "tokens_per_chunk": 2, "jitter": 0.1,
              "prefix_cache": "off", "engine_stall_every_s": 2.0, "engine_stall_s": 0.25, "max_loras": 2,
              "lora_load_ms": 40.0, "shape_compile_ms": 30.0}
    assert set(engine) == {f.name for f in dataclasses.fields(EngineConfig)} - {"seed"}
    args = [f"--{k.replace('_', '-')}={v}" for k, v in engine.items()]
    args += ["--preset", "tiny", "--model", "m", "--eos-median", "12", "--eos-sigma", "0.3", "--tokens-per-word",
             "1.3", "--early-eos-share", "0.3", "--fault", "reset=0.25", "--fault", "429=0.5", "--stall-s", "0.5",
             "--long-line-bytes", "4096",
             "--retry-after-s", "7", "--max-waiting", "9", "--max-body-mb", "0.5", "--trace-file", trace,
             "--seed", "42", "--reasoning-tokens", "lognormal:300:0.5", "--reasoning-field", "reasoning",
             "--reasoning-usage", "on", "--tool-call-p", "0.5", "--strict-stream-options", "on", "--embedding-dim", "4",
             "--timings", "on", "--image-patch-px", "14", "--close-after-p", "0.3", "--accept-delay-ms", "40",
             "--frames-per-write", "3", "--front-stall-every-s", "2", "--front-stall-s", "0.2"]
    config = served(*args)
    assert config == SimConfig(
        engine=EngineConfig(**engine, seed=42), model="m",
        policy=OutputPolicy(eos_median=12.0, eos_sigma=0.3, early_eos_share=0.3, tokens_per_word=1.3),
        behavior=Behavior(reasoning_tokens="lognormal:300:0.5", reasoning_field="reasoning", reasoning_usage="on",
                          tool_call_p=0.5, strict_stream_options="on", embedding_dim=4, timings="on",
                          image_patch_px=14, frames_per_write=3, front_stall_every_s=2.0, front_stall_s=0.2),
        faults=FaultConfig({"reset": 0.25, "429": 0.5}, stall_s=0.5, long_line_bytes=4096, retry_after_s=7),
        max_waiting=9, max_body_bytes=MIB // 2, trace_file=trace, seed=42, close_after_p=0.3, accept_delay_ms=40.0)
    assert set(FIELD_FLAGS) <= {a.split("=")[0] for a in args}  # the test really sets each derived flag
