"""The simulator's ground truth: one JSON line per request (``--trace-file``), written when the request ends.

Fields: ``id``, ``status`` ("ok", "client_gone", or the fault that ended it), ``fault``, ``kind``, ``stream``,
``model`` (the name the request asked for: a base model or a LoRA adapter), ``lora_loaded`` (this request's
admission had to load its adapter, paying ``--lora-load-ms``; false for a base model), ``prompt_tokens`` (image
tokens included), ``images`` (one ``{format, width, height, bytes, tokens}`` per image part, in prompt order;
empty without images), ``cached_tokens`` (None with the prefix cache off), ``output_tokens``, ``finish_reason``,
``preemptions``, ``reasoning_tokens``, ``tool_call``; times on the server's monotonic clock: ``arrival`` (first
request bytes), ``admitted``, ``first_token``, ``first_reasoning``, ``first_content``, ``first_tool_call``,
``finished`` (the last byte, or the moment the server saw the client go), ``token_times`` (one per emission), and
``arrival_wall``/``finished_wall`` (the same on the wall clock); ``message_hashes`` (``prefix.message_hash`` of
each chat message, None for completions).
"""

from __future__ import annotations

import json

from harness.sim.job import Job
from harness.sim.prefix import message_hash

__all__ = ["trace_line"]


def trace_line(job: Job, now: float, wall_offset: float, cached_tokens: int | None) -> str:
    """The trace's line for ``job``, which ended at ``now`` with ``job.status`` (newline included)."""
    gen, status = job.gen, job.status
    return json.dumps({
        "id": job.id, "status": status, "fault": job.fault, "kind": gen.kind, "stream": gen.stream,
        "model": gen.model, "lora_loaded": any(seq.lora_loaded for seq in job.seqs),
        "prompt_tokens": gen.prompt_tokens, "images": [image.trace() for image in gen.images],
        "cached_tokens": cached_tokens, "output_tokens": job.emitted,
        "finish_reason": gen.finish_reason if status == "ok" else None,
        "preemptions": sum(seq.preemptions for seq in job.seqs),
        "reasoning_tokens": min(job.emitted, gen.plan.reasoning_tokens),
        "tool_call": gen.plan.tool is not None and job.first_tool_call is not None,
        "arrival": job.arrival, "admitted": job.seq.admitted_at, "first_token": job.first,
        "first_reasoning": job.first_reasoning, "first_content": job.first_content,
        "first_tool_call": job.first_tool_call,
        "finished": now, "token_times": job.times, "arrival_wall": job.arrival + wall_offset,
        "finished_wall": now + wall_offset,
        "message_hashes": None if gen.messages is None else [message_hash(role, text) for role, text in gen.messages],
    }) + "\n"
