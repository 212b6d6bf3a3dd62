"""What a worker's users draw their requests from: samplers, prompt builders, the class picker and the LoRA adapter
pickers, one set per worker and test (``WorkerSide.samplers``, remade at test start).

Each user gets its own seeded stream (the worker's index and a running count name it) over the worker's shared
prompt calibration; a mix's classes each their own builder behind the worker's one ``ClassPicker``; adapters one
picker per class, so a round robin cycles over the worker's requests (``spec/adapters.py``).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from harness.load.trace_kit import TraceKit
from harness.scenario import Workload
from harness.spec.adapters import adapter_picker
from harness.workload.agent_tree import TreeSampler
from harness.workload.images import ImageCache, ImageDrawer
from harness.workload.mix import ClassPicker, FixedUsers
from harness.workload.prompts import PromptBuilder
from harness.workload.sampler import MixSampler, PlannedRequest, RequestSampler, TraceSampler
from harness.workload.sessions import SessionSampler

__all__ = ["SHAPES_STREAM", "Samplers"]

SHAPES_STREAM = -1
"""The stream the shape warm-up draws from: the users' are positive, and every worker draws the same shapes."""


class Samplers:
    """``worker``: the ``WorkerSide`` (its scenario and index, read when a sampler is made)."""

    def __init__(self, worker: Any) -> None:
        self.worker = worker
        self._main: PromptBuilder | None = None
        self._picker: ClassPicker | None = None
        self._fixed: FixedUsers | None = None
        self._class_prompts: list[PromptBuilder] = []
        self._adapters: dict[int | None, Callable[[], str]] = {}
        self._samplers = 0
        self._images = ImageCache()
        """The worker's encoded images, shared by its users and classes."""
        self._trace: TraceKit | None = None
        """``workload.trace``: made at ``warm()``, before the load begins (it asks the endpoint's tokenizer)."""

    def warm(self) -> None:
        """Build the prompt builders (their corpus: ~50 ms of CPU) before the load begins, not in its first step."""
        w = self.worker.scenario.workload
        if w.mix:
            self._class_prompts = [self._new_builder(c.workload) for c in w.mix]
        else:
            self._builder()
        if w.trace is not None:
            self._trace = TraceKit(self.worker, w.trace, self._builder())

    def _trace_kit(self) -> TraceKit:
        if self._trace is None:
            self._trace = TraceKit(self.worker, self.worker.scenario.workload.trace, self._builder())
        return self._trace

    def _builder(self) -> PromptBuilder:
        if self._main is None:
            self._main = self._new_builder(self.worker.scenario.workload)
        return self._main

    def _new_builder(self, w: Workload) -> PromptBuilder:
        return PromptBuilder(api=self.worker.scenario.endpoint.api, shared_prefix_tokens=w.shared_prefix_tokens,
                             unique=w.unique_prompts, seed=w.seed, source=w.prompts)

    def session_sampler(self) -> SessionSampler | TreeSampler | None:
        """One user's stream of sessions (None when the workload has none); the worker's shared calibration. Agent
        session traces (``workload.trace`` of ``format: weka``): the user's lane."""
        w = self.worker.scenario.workload
        if w.trace is not None and w.trace.tree is not None:
            self._samplers += 1
            return self._trace_kit().lane(self.worker.worker_index * 100_000 + self._samplers)
        if w.sessions is None:
            return None
        self._samplers += 1
        return SessionSampler(w.sessions, self._builder(), seed=w.seed,
                              stream=self.worker.worker_index * 100_000 + self._samplers)

    def sampler(self) -> RequestSampler | MixSampler | TraceSampler:
        """A request sampler for one user: its own seeded stream, the worker's shared prompt calibration; with a mix,
        one per class (each its own stream and calibration) behind the worker's one class picker; with a trace, the
        worker's place in it."""
        w = self.worker.scenario.workload
        if w.trace is not None:
            return self._trace_kit().sampler()
        self._samplers += 1
        stream = self.worker.worker_index * 100_000 + self._samplers
        if not w.mix:
            return self._sampler(w, self._builder(), stream)
        weighted = [i for i, c in enumerate(w.mix) if c.users is None]
        if self._picker is None:
            self._picker = ClassPicker([w.mix[i].weight for i in weighted], start=self.worker.worker_index)
            if len(weighted) < len(w.mix):
                self._fixed = FixedUsers([c.users for c in w.mix], self.worker.worker_index)
        if not self._class_prompts:
            self._class_prompts = [self._new_builder(c.workload) for c in w.mix]
        picker, fixed, user = self._picker, self._fixed, self._samplers

        def pick() -> int:  # a user holding a fixed class's place runs it; the others are dealt the weighted ones
            held = fixed.pick(user, self.worker.fleet_size) if fixed is not None else None
            return weighted[picker.pick()] if held is None else held

        # a class's stream is apart from the others' and from the single-class streams (1000 classes at most)
        classes = list(enumerate(zip(w.mix, self._class_prompts, strict=True)))
        return MixSampler([None if c.workload.sessions else self._sampler(c.workload, b, stream * 1000 + i)
                           for i, (c, b) in classes], pick, user=user,
                          sessions=[SessionSampler(c.workload.sessions, b, seed=c.workload.seed,
                                                   stream=stream * 1000 + i) if c.workload.sessions else None
                                    for i, (c, b) in classes])

    def shapes(self) -> list[PlannedRequest]:
        """``load.warmup_shapes``: one request per prompt-length bucket of each class of requests (sessions send
        their own), the same list on every worker (streams of their own, named alike)."""
        w = self.worker.scenario.workload
        if not self.worker.scenario.load.warmup_shapes or w.sessions is not None or w.trace is not None:
            return []
        if not w.mix:
            return self._sampler(w, self._builder(), SHAPES_STREAM).shapes()
        if not self._class_prompts:
            self._class_prompts = [self._new_builder(c.workload) for c in w.mix]
        out = []
        for i, (c, builder) in enumerate(zip(w.mix, self._class_prompts, strict=True)):
            if c.workload.sessions is None:
                for plan in self._sampler(c.workload, builder, SHAPES_STREAM * 1000 - i).shapes():
                    plan.class_index = i
                    out.append(plan)
        return out

    def release(self, sampler: object) -> None:
        """A user stopped: its fixed class's place (``workload.mix`` ``users:``), if it held one, is free again."""
        if self._fixed is not None and isinstance(sampler, MixSampler):
            self._fixed.release(sampler.user)

    def _sampler(self, w: Workload, prompts: PromptBuilder, stream: int) -> RequestSampler:
        return RequestSampler(input_tokens=w.input_tokens, output_tokens=w.output_tokens, joint=w.joint,
                              api=self.worker.scenario.endpoint.api, seed=w.seed, worker=stream, prompts=prompts,
                              cancel=w.cancel, patience=w.patience, images=None if w.images is None else
                              ImageDrawer(w.images, api=self.worker.scenario.endpoint.api, seed=w.seed,
                                          cache=self._images))

    def adapter(self, class_index: int | None) -> str:
        """The next request's LoRA adapter (``endpoint.adapters``, or its class's): one picker per class per worker,
        so a round robin cycles over the worker's requests."""
        picker = self._adapters.get(class_index)
        if picker is None:
            sc = self.worker.scenario
            ep = sc.endpoint if class_index is None else sc.class_endpoint(sc.workload.mix[class_index])
            rng = random.Random(f"kneecap/{sc.workload.seed}/{self.worker.worker_index}/adapters/{class_index}")
            picker = adapter_picker(ep.adapters, rng, start=self.worker.worker_index)
            self._adapters[class_index] = picker
        return picker()
