"""The built-in OpenAI-compatible LLM server simulator (``kneecap sim``).

Layers, bottom up: ``kv`` (KV blocks and the prefix cache over them), ``engine`` (pure batching/capacity
model), ``prefix`` (prompt units and block hashes), ``text`` (the words the model writes), ``plan``
(reasoning, answer and tool call of each request); the APIs: ``openai`` (chat/completions request
validation) and ``chat_stream`` (their vLLM-exact bytes), ``responses`` (OpenAI's Responses API),
``anthropic`` (Messages), ``embeddings``, ``images`` (image parts); ``lora`` (adapter slots) and
``models`` (what is served, routing); then ``faults`` (what breaks), ``http`` (a minimal streaming HTTP/1.1
server), ``metrics`` (Prometheus, vLLM names), ``job`` (one request's state),
``trace`` (the ground-truth line), ``loop_stats`` (``/sim/stats``),
``server`` (the real-time loops tying them together).
"""

from __future__ import annotations

import asyncio
import signal
import sys

from harness.sim.engine import Engine, EngineConfig, Sequence
from harness.sim.faults import FaultConfig
from harness.sim.openai import OutputPolicy
from harness.sim.plan import Behavior
from harness.sim.presets import DEFAULT_PRESET, PRESETS
from harness.sim.server import SimConfig, SimServer

__all__ = ["DEFAULT_PRESET", "PRESETS", "Behavior", "Engine", "EngineConfig", "FaultConfig", "OutputPolicy", "Sequence",
           "SimConfig", "SimServer", "run_sim"]


def _describe(config: SimConfig) -> str:
    e = config.engine
    if config.served:
        names = ", ".join(m.name if m.iter_base_ms is None else f"{m.name} (iteration {m.iter_base_ms} ms)"
                          for m in config.served)
    else:
        names = config.model
    if config.loras:
        names += f" + {len(config.loras)} LoRA adapter{'s' * (len(config.loras) > 1)} (max {e.max_loras} resident)"
    return (f"{names}: {e.max_num_seqs} slots, KV {e.kv_cache_tokens} tokens, context {e.max_model_len}, "
            f"iteration {e.iter_base_ms} ms + {e.iter_per_seq_ms} ms/seq, "
            f"prefill {e.prefill_per_ktoken_ms} ms/1k tokens, prefix cache {e.prefix_cache}")


def run_sim(config: SimConfig, host: str = "127.0.0.1", port: int = 8000) -> None:
    """Serve until SIGINT/SIGTERM. Prints one line with the bound address (``--port 0`` picks one)."""
    try:
        import uvloop
    except ImportError:  # uvloop is optional where it does not build (Windows)
        uvloop = None  # type: ignore[assignment]  # None: asyncio's own loop

    async def main() -> None:
        server = SimServer(config)
        bound = await server.serve(host, port)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        print(f"kneecap sim serving {_describe(config)} on http://{host}:{bound}", flush=True)
        await stop.wait()
        await server.close()
        print("kneecap sim stopped", file=sys.stderr, flush=True)

    if uvloop is not None:
        uvloop.run(main())
    else:
        asyncio.run(main())
