"""The simulator engine's deployment shape (``EngineConfig``): slots, KV cache, token budget, iteration costs,
jitter, prefix cache, stalls and LoRA slots, with the checks that reject a shape the engine cannot run. Pure.

Every field is a ``kneecap sim`` flag of the same name (``cli.py`` reads the ``help`` metadata); ``engine.py`` has the
model these numbers drive and re-exports the class.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["EngineConfig"]


def _opt(default: float | str, help: str) -> Any:
    return field(default=default, metadata={"help": help})


@dataclass(frozen=True)
class EngineConfig:
    """Deployment shape. Every field is a ``kneecap sim`` flag of the same name (dashes for underscores),
    documented in its ``help`` metadata."""

    max_num_seqs: int = _opt(64, "Concurrent sequences in the batch (slots).")
    kv_cache_tokens: int = _opt(131_072, "KV-cache capacity in tokens (prompt + generated of all running sequences).")
    block_size: int = _opt(16, "KV-cache block size in tokens; capacity is allocated in whole blocks.")
    max_num_batched_tokens: int = _opt(2048, "Token budget of one iteration (decode tokens + prefill chunk tokens).")
    max_model_len: int = _opt(8192, "Context window: prompt + output tokens of one request.")
    iter_base_ms: float = _opt(8.0, "Fixed cost of one iteration (kernel launches, sampling).")
    iter_per_seq_ms: float = _opt(0.15, "Added cost per decoding sequence.")
    iter_per_kv_ktoken_ms: float = _opt(0.0, "Added cost per 1000 context tokens read by decoding sequences.")
    prefill_per_ktoken_ms: float = _opt(50.0, "Cost per 1000 prompt tokens prefilled in the iteration.")
    tokens_per_chunk: int = _opt(1, "Tokens each decoding sequence emits per iteration (>1: speculative decoding).")
    jitter: float = _opt(0.0, "Relative standard deviation of the iteration time (0 = deterministic).")
    seed: int = _opt(0, "Seed of the jitter.")
    prefix_cache: str = _opt("on", "Prefix cache (vLLM's automatic prefix caching): on or off.")
    """``"on"`` or ``"off"`` (the CLI offers exactly these)."""
    engine_stall_every_s: float = _opt(0.0, "Stop the whole engine every this many seconds (a GC pause or noisy "
                                            "neighbour; 0 = never).")
    engine_stall_s: float = _opt(0.0, "How long each engine stall lasts.")
    max_loras: int = _opt(1, "LoRA adapters in one batch at once (vLLM's --max-loras; resident on the GPU, least "
                             "recently used evicted).")
    shape_compile_ms: float = _opt(0.0, "The first admission of each prompt-length bucket (powers of two) costs this "
                                        "much more, paid by its iteration: an engine that compiles per shape.")
    lora_load_ms: float = _opt(25.0, "Cost of loading a LoRA adapter that is not resident, paid by the iteration "
                                     "that admits its request.")

    def problems(self) -> list[str]:
        """Everything wrong with this configuration, as readable sentences (empty when valid)."""
        out = []
        for name in ("max_num_seqs", "kv_cache_tokens", "block_size", "max_num_batched_tokens",
                     "max_model_len", "tokens_per_chunk", "max_loras"):
            if getattr(self, name) < 1:
                out.append(f"{name} must be >= 1, got {getattr(self, name)}")
        for name in ("iter_base_ms", "iter_per_seq_ms", "iter_per_kv_ktoken_ms", "prefill_per_ktoken_ms", "jitter",
                     "engine_stall_every_s", "engine_stall_s", "lora_load_ms", "shape_compile_ms"):
            if getattr(self, name) < 0:
                out.append(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.iter_base_ms + self.iter_per_seq_ms <= 0:
            out.append("iter_base_ms + iter_per_seq_ms must be > 0, or iterations would take no time")
        if self.prefix_cache not in ("on", "off"):
            out.append(f"prefix_cache must be 'on' or 'off', got {self.prefix_cache!r}")
        if self.engine_stall_every_s > 0 and self.engine_stall_s >= self.engine_stall_every_s:
            out.append(f"engine_stall_s ({self.engine_stall_s}) must be shorter than engine_stall_every_s "
                       f"({self.engine_stall_every_s}), or the engine would never run")
        if self.engine_stall_s > 0 and self.engine_stall_every_s <= 0:
            out.append("engine_stall_s needs engine_stall_every_s > 0 (how often the engine stalls)")
        if self.kv_cache_tokens < self.max_model_len:
            out.append(f"kv_cache_tokens ({self.kv_cache_tokens}) must hold one full context "
                       f"(max_model_len={self.max_model_len})")
        return out
