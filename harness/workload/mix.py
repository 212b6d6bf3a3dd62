"""The workload section: one class of requests, or a weighted mix of them (``workload.mix``). Pure.

A *class* is a named kind of traffic with its own lengths (``input_tokens``/``output_tokens`` or ``joint``,
``shared_prefix_tokens``, ``images``), its own endpoint overrides (``model``, ``extra_body``, ``headers``,
``ignore_eos``: a model or LoRA adapter per class, a gateway header) and its own ``slo``. Each request is one
class's, drawn by ``weight`` (shares of requests, in closed and open loop alike): ``ClassPicker`` deals the classes
out in smooth weighted round robin (nginx's), so after any N requests each class has had its weight's share of them
to within two requests per worker (1.54 at worst over 300 random weight sets of up to 6 classes) — no sampling
noise to wait out (a 30% class of 1,000 random draws is off by ±1.4 points one time in three).

::

    workload:
      seed: 1
      mix:
        - {name: chat, weight: 0.7, input_tokens: {dist: lognormal, median: 500, sigma: 0.7}, output_tokens: 200}
        - name: rag
          weight: 0.3
          input_tokens: {dist: lognormal, median: 6000, sigma: 0.3}
          output_tokens: 100
          endpoint: {model: rag-lora}
          slo: {ttft: ["p(95)<3000"]}

A class may instead hold a fixed number of the fleet's users (``users: 4`` for a nightly batch job, no
``weight``): in closed loop those users run it whatever the step, and the step's other users share the weighted
classes by weight ("how many chat users can we hold while the batch runs?"); a step's users count them all
(a staircase of 8, 16, 32 with a class of 4 users runs 4, 12, 28 chat users). Open loop has no users to fix.

A class may run multi-turn sessions (``sessions:``, as the workload's own): a pick of that class is one whole
session, turn by turn, so its weight is a share of the users' tasks (a session or a request), not of requests; its
turns are its requests in every per-class figure, and the step's ``sessions`` block covers its sessions.

Not yet within a class: batches (embeddings), another ``api`` — each is refused with its key path.
Users who hang up (``cancel``, ``patience``: ``workload/cancel.py``) are a class's own, or the workload's for every
class that sets none.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from harness.checker import Checker
from harness.endpoint import parse_headers
from harness.spec.adapters import adapters_from_spec
from harness.workload.cancel import HANGUP_KEYS, Cancel, Patience, cancel_from_spec, patience_from_spec
from harness.workload.images import ImageSpec, images_from_spec
from harness.workload.lengths import JointEmpirical, Length
from harness.workload.prefix_trace import PrefixTrace, prefix_trace_from_spec
from harness.workload.prompt_file import PromptSource, prompts_from_spec
from harness.workload.sessions import SessionSpec, sessions_from_spec
from harness.workload.spec import joint_from_spec, length_from_spec

__all__ = ["CLASS_ENDPOINT_KEYS", "ClassPicker", "FixedUsers", "TrafficClass", "Workload", "workload_from_spec"]

CLASS_ENDPOINT_KEYS = ("model", "extra_body", "headers", "ignore_eos", "adapters")
"""What a class may set of the endpoint; the rest (host, api, timeouts, TLS) is one per scenario."""
_LENGTH_KEYS = ("input_tokens", "output_tokens", "joint", "shared_prefix_tokens", "unique_prompts", "prompts",
                "images")


@dataclass(frozen=True, kw_only=True)
class TrafficClass:
    name: str
    weight: float
    """Share of requests, relative to the other classes' weights; 0 for a class of fixed ``users``."""
    workload: Workload
    users: int | None = None
    """Closed loop: this many of the fleet's users run this class, whatever the step's users (``FixedUsers``)."""
    endpoint: dict = field(default_factory=dict)
    """Overrides of the scenario's endpoint (``CLASS_ENDPOINT_KEYS``), applied by ``Scenario.class_endpoint``."""
    slo: tuple = ()
    """Thresholds (``spec.slo.Threshold``) judged on this class's requests alone."""


@dataclass(frozen=True, kw_only=True)
class Workload:
    input_tokens: Length | None
    output_tokens: Length | None
    joint: JointEmpirical | None
    shared_prefix_tokens: int = 0
    unique_prompts: bool = True
    seed: int = 0
    prompts: PromptSource = field(default_factory=PromptSource)
    """Where the prompts' text comes from (``harness.workload.prompt_file``); with a file and no ``input_tokens``
    (nor ``joint``), each prompt keeps its own length."""
    sessions: SessionSpec | None = None
    """Multi-turn sessions instead of independent requests (``harness.workload.sessions``)."""
    batch: Length | None = None
    """``api: embeddings``: inputs per request (each of ``input_tokens``); None: one."""
    mix: tuple[TrafficClass, ...] = ()
    """Classes of requests by weight (module docstring); empty: the workload is one class."""
    cancel: Cancel | None = None
    """A share of requests closed a drawn delay after they were sent (``workload/cancel.py``)."""
    patience: Patience | None = None
    """Requests closed when their first token is later than this."""
    images: ImageSpec | None = None
    """Images added to each request (``workload/images.py``); a mix's: each class's own, else the workload's."""
    trace: PrefixTrace | None = None
    """A prefix-structured trace replayed in its order (``workload/prefix_trace.py``): its own prompts and lengths."""

    @property
    def class_names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.mix)


_WORKLOAD_KEYS = ("input_tokens", "output_tokens", "joint", "shared_prefix_tokens", "unique_prompts", "seed",
                  "sessions", "batch", "mix", "prompts", "images", "trace", *HANGUP_KEYS)


def workload_from_spec(node: Any, check: Checker, slo: Callable[[Any, str, Checker], tuple],
                       path: str = "workload") -> Workload | None:
    """The ``workload`` section (``slo`` parses a class's ``slo`` block at a key path); problems go to ``check``."""
    if check.mapping(node, path, _WORKLOAD_KEYS) is None:
        return None
    seed = check.number(node, "seed", path, 0, integer=True)
    if "mix" in node:
        given = [k for k in _WORKLOAD_KEYS if k in node and k not in ("mix", "seed", "images", *HANGUP_KEYS)]
        if given:
            check.fail(path, f"with mix, each class sets its own lengths: move {', '.join(given)} into the classes")
        cancel, patience = _hangups(node, path, check)
        images = images_from_spec(node["images"], f"{path}.images", check) if "images" in node else None
        classes = _mix(node["mix"], f"{path}.mix", check, slo, seed)
        for key in (*HANGUP_KEYS, "images"):  # the workload's go to every class, and sessions take none yet
            talking = [c.name for c in classes if c.workload.sessions is not None]
            if key in node and talking:
                check.fail(f"{path}.{key}", f"applies to every class without its own, and {talking[0]} runs "
                                            f"sessions, which take no {key} yet: move {key} into the other classes")
        classes = tuple(dataclasses.replace(c, workload=dataclasses.replace(  # the workload's for a class without
            c.workload, cancel=c.workload.cancel or cancel, patience=c.workload.patience or patience,
            images=c.workload.images or images)) for c in classes)
        return Workload(input_tokens=None, output_tokens=None, joint=None, seed=seed, mix=classes, cancel=cancel,
                        patience=patience, images=images)
    if "trace" in node:
        given = [k for k in _WORKLOAD_KEYS if k in node and k not in ("trace", "seed")]
        if given:
            check.fail(path, f"a trace gives the prompts and lengths of every request: remove {', '.join(given)}")
        return Workload(input_tokens=None, output_tokens=None, joint=None, seed=seed,
                        trace=prefix_trace_from_spec(node["trace"], f"{path}.trace", check))
    return _one_class(node, path, check, seed)


def _hangups(node: dict, path: str, check: Checker) -> tuple[Cancel | None, Patience | None]:
    """The ``cancel`` and ``patience`` blocks at ``path``, each None when absent (or malformed: then a problem)."""
    return (cancel_from_spec(node["cancel"], f"{path}.cancel", check) if "cancel" in node else None,
            patience_from_spec(node["patience"], f"{path}.patience", check) if "patience" in node else None)


def _one_class(node: dict, path: str, check: Checker, seed: int) -> Workload:
    joint = sessions = inp = out = None
    prompts = prompts_from_spec(node["prompts"], f"{path}.prompts", check) if "prompts" in node else PromptSource()
    from_file = isinstance(node.get("prompts"), dict) and "file" in node["prompts"]  # a bad file: still no input
    if "sessions" in node:
        if from_file:
            check.fail(f"{path}.prompts.file", "a prompt file within sessions is not supported yet: sessions take "
                                               "prompts: {corpus: ...}")
        given = [k for k in ("input_tokens", "output_tokens", "joint") if k in node]
        if given:
            check.fail(path, f"sessions set their own lengths (first_input_tokens, turn_input_tokens, "
                             f"output_tokens): remove {', '.join(given)}")
        sharegpt = isinstance(node["sessions"], dict) and node["sessions"].get("format") == "sharegpt"
        if node.get("unique_prompts") is False and not sharegpt:  # a file's texts may go exactly as written
            check.fail(f"{path}.unique_prompts", "sessions need unique first prompts (the nonce keeps sessions "
                                                 "apart); remove unique_prompts: false")
        sessions = sessions_from_spec(node["sessions"], f"{path}.sessions", check)
    elif "joint" in node:
        if "input_tokens" in node or "output_tokens" in node:
            check.fail(path, "give either joint or input_tokens + output_tokens, not both")
        joint = joint_from_spec(node["joint"], f"{path}.joint", check)
    else:
        for key in ("output_tokens",) if from_file else ("input_tokens", "output_tokens"):
            if key not in node:
                check.fail(path, f"missing required key '{key}' (or give one joint distribution, or sessions)")
        inp = length_from_spec(node["input_tokens"], f"{path}.input_tokens", check) if "input_tokens" in node \
            else None
        out = length_from_spec(node["output_tokens"], f"{path}.output_tokens", check) if "output_tokens" in node \
            else None
    batch = length_from_spec(node["batch"], f"{path}.batch", check) if "batch" in node else None
    cancel, patience = _hangups(node, path, check)
    for key in (*HANGUP_KEYS, "images"):
        if key in node and sessions is not None:
            check.fail(f"{path}.{key}", "not with sessions yet: use it in a scenario of independent requests")
    images = images_from_spec(node["images"], f"{path}.images", check) if "images" in node else None
    return Workload(input_tokens=inp, output_tokens=out, joint=joint, sessions=sessions, batch=batch,
                    cancel=cancel, patience=patience, images=images,
                    shared_prefix_tokens=check.number(node, "shared_prefix_tokens", path, 0, integer=True, minimum=0),
                    unique_prompts=check.boolean(node, "unique_prompts", path, True), seed=seed, prompts=prompts)


def _mix(node: Any, path: str, check: Checker, slo: Callable[[Any, str, Checker], tuple],
         seed: int) -> tuple[TrafficClass, ...]:
    if not isinstance(node, list) or not node:
        check.fail(path, "expected a list of classes, each {name, weight, input_tokens, output_tokens, ...}")
        return ()
    out, seen = [], set()
    for i, item in enumerate(node):
        where = f"{path}[{i}]"
        keys = ("name", "weight", "users", *_LENGTH_KEYS, *HANGUP_KEYS, "endpoint", "slo", "sessions", "batch")
        if not isinstance(item, dict):
            check.mapping(item, where, keys)
            continue
        name = check.string(item, "name", where, None, name=True)
        where = f"{path}.{name}" if name else where  # by its name from here on: the key path a user can find
        check.mapping(item, where, keys, required=("name",))
        if name in seen:
            check.fail(where, f"a second class named '{name}': class names must differ")
        seen.add(name)
        weight, users = _weight_or_users(item, where, check)
        if "batch" in item:
            check.fail(f"{where}.batch", "batch within a mix class is not supported yet: run that traffic in a "
                                         "scenario of its own")
        lengths = {k: v for k, v in item.items() if k in _LENGTH_KEYS or k in HANGUP_KEYS or k == "sessions"}
        workload = _one_class(lengths, where, check, seed)
        endpoint = item.get("endpoint", {})
        if check.mapping(endpoint, f"{where}.endpoint", CLASS_ENDPOINT_KEYS) is not None:
            if "model" in endpoint:
                check.string(endpoint, "model", f"{where}.endpoint")
            if "ignore_eos" in endpoint:
                check.boolean(endpoint, "ignore_eos", f"{where}.endpoint", True)
            if "extra_body" in endpoint and not isinstance(endpoint["extra_body"], dict):
                check.fail(f"{where}.endpoint.extra_body", "expected a mapping (merged over the endpoint's own)")
            if "adapters" in endpoint:
                endpoint = {**endpoint, "adapters": adapters_from_spec(endpoint["adapters"],
                                                                       f"{where}.endpoint.adapters", check)}
            if "headers" in endpoint:
                headers = parse_headers(endpoint["headers"], check, f"{where}.endpoint.headers")
                endpoint = {**endpoint, "headers": headers}
        thresholds = slo(item.get("slo", {}), f"{where}.slo", check)
        if name and (weight is not None or users is not None):
            out.append(TrafficClass(name=name, weight=float(weight or 0.0), workload=workload, users=users,
                                    endpoint=dict(endpoint) if isinstance(endpoint, dict) else {}, slo=thresholds))
    if out and len(out) == len(node) and all(c.users is not None for c in out):
        check.fail(path, "every class has fixed users: give at least one class a weight (the step's other users "
                         "run the weighted classes)")
    return tuple(out)


def _weight_or_users(item: dict, where: str, check: Checker) -> tuple[float | None, int | None]:
    """A class's ``weight`` (a share of requests) or ``users`` (a fixed number of users), exactly one of them."""
    if "weight" in item and "users" in item:
        check.fail(where, "give weight (a share of the requests) or users (a fixed number of users), not both")
        return None, None
    if "users" in item:
        return None, check.number(item, "users", where, None, integer=True, minimum=1)
    if "weight" not in item:
        check.fail(where, "missing required key 'weight' (a share of the requests; or users: a fixed number of "
                          "users)")
        return None, None
    return check.number(item, "weight", where, None, above=0), None


class ClassPicker:
    """Deals out class indices in proportion to ``weights`` (smooth weighted round robin, as nginx balances
    upstreams): every class gets within two picks of its share after any number of picks, and picks of one class
    are spread out, not bunched. ``start`` turns the sequence for one worker, so a fleet's workers do not all
    begin with the same class."""

    def __init__(self, weights: list[float] | tuple[float, ...], start: int = 0) -> None:
        if not weights or min(weights) <= 0:
            raise ValueError(f"ClassPicker needs positive weights, got {list(weights)}")
        self._weights, self._total = list(weights), float(sum(weights))
        self._current = [0.0] * len(weights)
        for _ in range(start % max(1, len(weights))):
            self.pick()

    def pick(self) -> int:
        cur = self._current
        for i, w in enumerate(self._weights):
            cur[i] += w
        best = max(range(len(cur)), key=cur.__getitem__)
        cur[best] -= self._total
        return best


class FixedUsers:
    """Which of a worker's users run the classes of fixed ``users`` (``counts``: per class, None for a weighted one).

    The fleet's fixed places are numbered class by class and dealt to the workers in turn (place k to the worker
    whose index is k modulo the fleet's size), so the fleet holds each class's count however many workers it has.
    A worker's users take its places first come, at their next request, and keep them; a place a stopped user
    left goes to the next user to ask, and a user whose place its worker no longer has (the fleet grew) gives it
    up at its next request. A user without a place (None) runs the weighted classes."""

    def __init__(self, counts: list[int | None] | tuple[int | None, ...], worker: int) -> None:
        self._slots = [c for c, n in enumerate(counts) for _ in range(n or 0)]
        self._worker, self._stride = worker, 0
        self._quota, self._held = [0] * len(counts), [0] * len(counts)
        self._holders: dict[int, int] = {}

    def pick(self, user: int, stride: int) -> int | None:
        """The class ``user`` runs now (None: a weighted one) in a fleet of ``stride`` workers."""
        if stride != self._stride:
            self._stride, self._quota = stride, [0] * len(self._held)
            for k, c in enumerate(self._slots):
                if k % max(1, stride) == self._worker % max(1, stride):
                    self._quota[c] += 1
        held = self._holders.get(user)
        if held is not None:
            if self._held[held] <= self._quota[held]:
                return held
            self.release(user)
        for c, quota in enumerate(self._quota):
            if self._held[c] < quota:
                self._holders[user] = c
                self._held[c] += 1
                return c
        return None

    def release(self, user: int) -> None:
        """``user`` stopped: its place (if any) is free for the next user to ask."""
        c = self._holders.pop(user, None)
        if c is not None:
            self._held[c] -= 1
