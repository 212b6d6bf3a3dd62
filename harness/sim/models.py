"""What the simulator serves: base models, each on its own engine, and LoRA adapters on top of them. Pure.

Flags (``kneecap sim``):

- ``--serve-model NAME[:ITER_BASE_MS]``, repeatable: serve NAME on an engine of its own (its own slots, KV cache
  and queue: a separate deployment), all engine flags as given or the preset's, but ``iter_base_ms`` when one
  follows the last ``:`` (a number; otherwise the colon is part of the name, so ``llama3:8b`` is a name). Without
  the flag the simulator serves one model, ``--model`` or ``sim-<preset>``, as it always did; with it ``--model``
  is refused (say the name in ``--serve-model``).
- ``--lora NAME[@BASE]``, repeatable: a LoRA adapter served on BASE's engine (default: the first model), as vLLM's
  ``--lora-modules NAME=PATH``; ``--lora-count N`` adds ``lora-0`` … ``lora-<N-1>`` on the first model. How many
  are resident and what a load costs are engine flags (``--max-loras``, ``--lora-load-ms``; ``lora.py``).

Routing: a request's ``model`` names a base model or an adapter (``Route``); anything else is 404
``model_not_found`` listing every served name. ``/v1/models`` lists the base models, then the adapters with
``parent`` = their base, as vLLM's ``show_available_models`` does.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

from harness.sim.engine_config import EngineConfig

__all__ = ["Adapter", "Route", "ServedModel", "deployments", "lora_count", "model_cards", "parse_lora", "problems",
           "routes"]


@dataclass(frozen=True)
class ServedModel:
    """A base model of its own engine (``--serve-model NAME[:ITER_BASE_MS]``)."""

    name: str
    iter_base_ms: float | None = None
    """Its iteration's fixed cost; None: the engine flags' (or preset's) ``iter_base_ms``."""

    @classmethod
    def parse(cls, spec: str) -> ServedModel:
        name, colon, ms = spec.rpartition(":")
        if colon and re.fullmatch(r"-?(\d+(\.\d*)?|\.\d+)", ms.strip()):
            if not name.strip():
                raise ValueError(f"--serve-model {spec!r}: expected NAME[:ITER_BASE_MS], e.g. fast:4")
            return cls(name.strip(), float(ms))
        if not spec.strip():
            raise ValueError("--serve-model '': expected NAME[:ITER_BASE_MS], e.g. fast:4")
        return cls(spec.strip())


@dataclass(frozen=True)
class Adapter:
    """A LoRA adapter (``--lora NAME[@BASE]``: ``parse_lora``) and the base model it runs on (None: the first)."""

    name: str
    base: str | None = None


def parse_lora(spec: str) -> Adapter:
    """``--lora NAME[@BASE]``."""
    name, at, base = spec.partition("@")
    if not name.strip() or (at and not base.strip()):
        raise ValueError(f"--lora {spec!r}: expected NAME or NAME@BASE, e.g. sql-lora@fast")
    return Adapter(name.strip(), base.strip() if at else None)


def lora_count(n: int) -> tuple[Adapter, ...]:
    """``--lora-count N``: adapters ``lora-0`` … ``lora-<N-1>`` on the first model."""
    return tuple(Adapter(f"lora-{i}") for i in range(n))


@dataclass(frozen=True, slots=True)
class Route:
    """Where a request's ``model`` runs: its base model's engine, with an adapter or not."""

    base: str
    adapter: str | None = None


def deployments(model: str, engine: EngineConfig, served: tuple[ServedModel, ...]) -> dict[str, EngineConfig]:
    """Each base model's engine: ``model`` on ``engine`` when ``served`` is empty, else one per served model."""
    if not served:
        return {model: engine}
    return {m.name: engine if m.iter_base_ms is None else dataclasses.replace(engine, iter_base_ms=m.iter_base_ms)
            for m in served}


def routes(bases: list[str], loras: tuple[Adapter, ...]) -> dict[str, Route]:
    """Every served name (bases first, then adapters, in flag order) and where it runs."""
    out = {name: Route(name) for name in bases}
    out.update((a.name, Route(a.base or bases[0], a.name)) for a in loras)
    return out


def problems(served: tuple[ServedModel, ...], loras: tuple[Adapter, ...], *, model: str, model_flag: bool,
             engine: EngineConfig) -> list[str]:
    """Everything wrong with the served models, as readable sentences (empty when valid). ``model`` is the single
    model's name (``--model`` or ``sim-<preset>``), ``model_flag`` whether ``--model`` was given, ``engine`` the
    engine flags (checked elsewhere; here only what a model's own ``iter_base_ms`` breaks)."""
    out = []
    for m in served:
        if m.iter_base_ms is not None:
            own = dataclasses.replace(engine, iter_base_ms=m.iter_base_ms).problems()
            out += [f"--serve-model {m.name}:{m.iter_base_ms:g}: {p}" for p in own if p not in engine.problems()]
    if model_flag and served:
        out.append(f"--model {model!r} and --serve-model both name the served models; give every name with "
                   f"--serve-model")
    bases = [m.name for m in served] or [model]
    names = bases + [a.name for a in loras]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        out.append(f"served model and adapter names must be unique; repeated: {', '.join(repeated)}")
    for a in loras:
        if a.base is not None and a.base not in bases:
            out.append(f"--lora {a.name}@{a.base}: no served model {a.base!r} (served: {', '.join(bases)})")
    return out


def model_cards(engines: dict[str, EngineConfig], loras: tuple[Adapter, ...], created: int) -> list[dict]:
    """``/v1/models``' ``data``: the base models, then the adapters (``parent``: the base; no ``max_model_len``)."""
    cards = [{"id": name, "object": "model", "created": created, "owned_by": "kneecap", "root": name, "parent": None,
              "max_model_len": cfg.max_model_len} for name, cfg in engines.items()]
    first = next(iter(engines))
    cards += [{"id": a.name, "object": "model", "created": created, "owned_by": "kneecap", "root": a.name,
               "parent": a.base or first, "max_model_len": None} for a in loras]
    return cards
