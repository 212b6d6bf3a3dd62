"""The client's own cost: CPU seconds per process of a run, per streamed token. Pure.

Two figures, on purpose apart:

- **workers, in the steps**: the CPU seconds the workers spent while steps ran (shipped with every report,
  ``generator.cpu_s``) over the output tokens streamed in those steps (``generator.output_tokens``): the
  steady-state cost of streaming, what sizes a fleet (µs per token × tokens/s = cores).
- **whole client tree**: every kneecap process of ``kneecap run`` over its whole life — the parent, the
  master, each worker (start-up imports included) and the report build — over the same tokens. The built-in
  simulator is the server: it is listed, never added to the client's cost.

``kneecap run`` reaps its children with ``os.wait4`` (``procs.py``), times the report build, and writes
``processes.json`` (schema ``kneecap.processes/1``, docs/results.md) next to ``summary.json``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from harness.summary import Step

__all__ = ["PROCESSES_SCHEMA", "RoleCpu", "cost_line", "processes_block", "step_totals"]

PROCESSES_SCHEMA = "kneecap.processes/1"


@dataclass(frozen=True, kw_only=True)
class RoleCpu:
    """One process (or, for ``report``, one piece of work inside the parent) and the CPU it used."""

    role: str
    """``parent``, ``master``, ``worker-N``, ``sim`` (the built-in simulator, when kneecap started it), ``report``."""
    user_s: float
    sys_s: float
    max_rss_mb: float | None = None

    @property
    def cpu_s(self) -> float:
        return self.user_s + self.sys_s

    @property
    def client(self) -> bool:
        """Part of the client's cost (everything but the simulator, which plays the server)."""
        return self.role != "sim"


def step_totals(steps: Sequence[Step]) -> tuple[int, float | None]:
    """Output tokens streamed in the summary's steps (warm-up included) and the workers' CPU seconds in them
    (None when no worker measured it: an older kneecap's summary)."""
    tokens = sum(st.generator.output_tokens or 0 for st in steps)
    cpu = [st.generator.cpu_s for st in steps if isinstance(st.generator.cpu_s, (int, float))]
    return tokens, (sum(cpu) if cpu else None)


def _per_token(cpu_s: float | None, tokens: int) -> float | None:
    return round(cpu_s * 1e6 / tokens, 2) if cpu_s is not None and tokens else None


def processes_block(roles: list[RoleCpu], *, output_tokens: int, workers_cpu_in_steps: float | None) -> dict:
    """``processes.json``: CPU per role, the client's totals and its µs per streamed token."""
    workers = [r for r in roles if r.role.startswith("worker")]
    client = sum(r.cpu_s for r in roles if r.client)
    return {
        "schema": PROCESSES_SCHEMA,
        "roles": {r.role: {"cpu_s": round(r.cpu_s, 3), "user_s": round(r.user_s, 3), "sys_s": round(r.sys_s, 3),
                           "max_rss_mb": r.max_rss_mb} for r in roles},
        "output_tokens": output_tokens,
        "workers_cpu_s_in_steps": None if workers_cpu_in_steps is None else round(workers_cpu_in_steps, 3),
        "client_cpu_s": round(client, 3),
        "cpu_us_per_token": {"workers_in_steps": _per_token(workers_cpu_in_steps, output_tokens),
                             "workers": _per_token(sum(r.cpu_s for r in workers), output_tokens) if workers else None,
                             "client_tree": _per_token(client, output_tokens)},
    }


def cost_line(block: dict) -> str:
    """The console's one line, e.g. "client CPU: 41 µs per streamed token (workers, in the steps), 63 µs whole
    client tree (start-up included) over 120000 tokens; simulator 9.8 s"."""
    per = block["cpu_us_per_token"]
    roles = block["roles"]
    sim = f"; simulator {roles['sim']['cpu_s']:.1f} s" if "sim" in roles else ""
    if not block["output_tokens"]:
        return f"client CPU: {block['client_cpu_s']:.1f} s whole client tree (no output tokens streamed){sim}"
    tree = f"{per['client_tree']:.0f} µs whole client tree (start-up included)"
    if per["workers_in_steps"] is not None:
        return (f"client CPU: {per['workers_in_steps']:.0f} µs per streamed token (workers, in the steps), {tree} "
                f"over {block['output_tokens']} tokens{sim}")
    return f"client CPU: {tree} per streamed token over {block['output_tokens']} tokens{sim}"
