"""Deployment shapes for ``kneecap sim --preset``; every field can be overridden by its flag.

The figures are plausible for the named class of deployment, not measurements of one; what matters
is that each has a real capacity. Steady decode throughput with ``s`` busy slots is about
``s / (iter_base_ms + s * iter_per_seq_ms)`` tokens per ms, and the closed-loop knee sits at
``max_num_seqs`` users when the KV cache holds that many contexts.

| preset | models it imitates               | slots | KV tokens | base ms | per-seq ms | prefill ms/1k | context |
|--------|----------------------------------|-------|-----------|---------|------------|---------------|---------|
| tiny   | a fast test fixture              | 8     | 32768     | 2       | 0.25       | 10            | 4096    |
| small  | 7–8B model on one GPU            | 64    | 262144    | 8       | 0.15       | 50            | 8192    |
| large  | 70B-class model on one GPU (FP8) | 32    | 65536     | 25      | 0.5        | 250           | 8192    |
| long   | long-context tier, 1M context    | 16    | 4718592   | 5       | 0.2        | 2             | 1048576 |

Attention grows with the context: every preset but tiny adds ``iter_per_kv_ktoken_ms`` per 1000 context tokens
of each decoding sequence (long: 0.004, so a 256K-token context costs a decode step ~1 ms more), and prefill
costs ``prefill_per_ktoken_ms`` per 1000 prompt tokens, in chunks of ``max_num_batched_tokens`` that stall the
decoders' steps they share (long: a 256K-token prompt prefills in ~0.5 s plus 16 steps, 1M in ~2 s plus 64).
Long's KV cache holds 16 contexts of 256K tokens (or four of 1M), and ``kneecap sim`` accepts a request body of
at least 16 bytes per token of the context window (``server.body_limit``: 16 MB for long), so a 1M-token
prompt (~6.5 MB of JSON) fits. The engine's prefill cost is linear in the prompt (no quadratic attention term):
real hardware takes minutes for 1M tokens; the simulator seconds.
"""

from __future__ import annotations

from harness.sim.engine import EngineConfig

__all__ = ["DEFAULT_PRESET", "PRESETS"]

PRESETS: dict[str, EngineConfig] = {
    "tiny": EngineConfig(max_num_seqs=8, kv_cache_tokens=32_768, max_num_batched_tokens=2048, max_model_len=4096,
                         iter_base_ms=2.0, iter_per_seq_ms=0.25, prefill_per_ktoken_ms=10.0),
    "small": EngineConfig(max_num_seqs=64, kv_cache_tokens=262_144, max_num_batched_tokens=2048, max_model_len=8192,
                          iter_base_ms=8.0, iter_per_seq_ms=0.15, iter_per_kv_ktoken_ms=0.01,
                          prefill_per_ktoken_ms=50.0),
    "large": EngineConfig(max_num_seqs=32, kv_cache_tokens=65_536, max_num_batched_tokens=2048, max_model_len=8192,
                          iter_base_ms=25.0, iter_per_seq_ms=0.5, iter_per_kv_ktoken_ms=0.05,
                          prefill_per_ktoken_ms=250.0),
    "long": EngineConfig(max_num_seqs=16, kv_cache_tokens=4_718_592, max_num_batched_tokens=16_384,
                         max_model_len=1_048_576, iter_base_ms=5.0, iter_per_seq_ms=0.2, iter_per_kv_ktoken_ms=0.004,
                         prefill_per_ktoken_ms=2.0),
}
DEFAULT_PRESET = "small"
