"""Prefix-structured traces (Mooncake's FAST'25 format, Alibaba's Qwen-Bailian): requests that list the hash of each
block of their prompt, so two that share leading ids share that prefix. Read, turned into prompt text block by block,
and held against their own ceiling: the share of prompt tokens an unbounded prefix cache could serve. Pure.

The formats: JSON lines of ``timestamp``, ``input_length``, ``output_length`` and ``hash_ids``, one id per
``block_tokens`` tokens of the prompt, the last block cut to ``input_length``. Mooncake (kvcache-ai/Mooncake,
``FAST25-release/traces``): ``timestamp`` in ms, blocks of 512. Bailian (alibaba-edu/qwen-bailian-usagetraces-anon):
``timestamp`` in seconds from the file's start, blocks of 16, and ``chat_id``, ``parent_chat_id`` (-1: none),
``turn``, ``type``; a turn's ``input_length`` and ``hash_ids`` are its whole prompt, history included.

A block's text is made by ``token_blocks.BlockText``: the same id gives the same text wherever it recurs,
token-exact where the endpoint's tokenizer was asked which words are one token.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any

from harness.checker import Checker, json_lines
from harness.workload.agent_trace import AgentTrace, TreePlan, read_weka
from harness.workload.traces import MAX_TOKENS, TraceError

__all__ = ["BLOCK_TOKENS", "FORMATS", "SALTS", "PrefixTrace", "PrefixTrie", "TraceCursor", "TraceRequest",
           "ideal_cached", "prefix_trace_from_spec", "read_trace", "trace_salt"]

FORMATS = ("mooncake", "bailian", "weka")
BLOCK_TOKENS = {"mooncake": 512, "bailian": 16}
"""Weka sessions say their own (``block_size``)."""
TREE_CHOICES = {"bust": ("first_turn", "none"), "start": ("random", "first")}
"""Each format's own block (the traces as published); ``block_tokens`` says otherwise for a trace made another way."""
_MS = {"mooncake": 1.0, "bailian": 1000.0}
"""``timestamp``'s unit in ms: Mooncake's are ms, Bailian's seconds from the file's start."""
SALTS = ("run", "none", "request")

_FIELDS = ("timestamp", "input_length", "output_length", "hash_ids")


@dataclass(frozen=True)
class TraceRequest:
    t_ms: float
    input_tokens: int
    output_tokens: int
    hash_ids: tuple[int, ...]


@dataclass(frozen=True)
class PrefixTrace:
    """``workload.trace``: the requests, read when the scenario is, replayed in file order."""

    file: str
    block_tokens: int
    requests: tuple[TraceRequest, ...]
    salt: str = "run"
    """"run": a salt per run, so two runs share no block in the server's cache; "none": every run sends the same
    text; "request": a salt per request, so no two share a block (the control: the server should hit ~0)."""
    server_block: int = 16
    """The server's KV block (vLLM's default 16): the ceiling counts whole blocks of it."""
    tokenizer: str = "server"
    """Which words are one token: "server" (the endpoint's ``/tokenize``, approximate where it has none), "none"
    (approximate: the corpus's words), or the path of a ``tokenizer.json``."""
    sessions: tuple[AgentTrace, ...] = ()
    """``format: weka``: the recorded agent sessions, played as trees by the users (``agent_tree``)."""
    tree: TreePlan | None = None

    def ceiling(self, before: int = 0, after: int = 0) -> list[int]:
        """Each request's ideal cached tokens (``ideal_cached``; 0 with a salt per request)."""
        if self.salt == "request":
            return [0] * len(self.requests)
        return ideal_cached(self.requests, self.block_tokens, self.server_block, before, after)

    @property
    def max_id(self) -> int:
        ids = [r.hash_ids for r in self.requests] or [c.hash_ids for t in self.sessions for c, _ in t.root.walk()]
        return max((max(h, default=0) for h in ids), default=0)


def prefix_trace_from_spec(node: Any, path: str, check: Checker) -> PrefixTrace | None:
    """``{file, format?, block_tokens?, salt?, server_block?, tokenizer?}`` (``weka``: ``bust?, start?,
    think_cap_s?``); problems go to ``check``."""
    keys = ("file", "format", "block_tokens", "salt", "server_block", "tokenizer", "bust", "start", "think_cap_s")
    if check.mapping(node, path, keys, required=("file",)) is None:
        return None
    fmt = check.string(node, "format", path, "mooncake", choices=FORMATS)
    tree = _tree(node, path, check) if fmt == "weka" else None
    if tree is not None and "block_tokens" in node:
        check.fail(f"{path}.block_tokens", "a weka session gives its own (block_size): remove block_tokens")
    block = check.number(node, "block_tokens", path, BLOCK_TOKENS.get(str(fmt), 512), integer=True, minimum=1,
                         maximum=1_000_000)
    server = check.number(node, "server_block", path, 16, integer=True, minimum=1, maximum=1_000_000)
    salt = node.get("salt", "run")
    salt = {True: "run", False: "none"}.get(salt, salt) if isinstance(salt, bool) else salt  # YAML's on/off too
    if salt not in SALTS:
        check.fail(f"{path}.salt", f"must be one of {', '.join(SALTS)}; got {salt!r}")
    tokenizer = node.get("tokenizer", "server")
    if tokenizer not in ("server", "none"):
        tokenizer = check.file(node, "tokenizer", path)
        if tokenizer is not None and not _tokenizer_file(tokenizer):
            check.fail(f"{path}.tokenizer", f"{node['tokenizer']} is not a tokenizer.json (a JSON object with a "
                       "\"model\"); or say server (the endpoint's /tokenize) or none")
    full = check.file(node, "file", path, folder=fmt == "weka")
    if full is None or block is None or server is None or tokenizer is None:
        return None
    try:
        if tree is not None:
            sessions = tuple(read_weka(full))
            return PrefixTrace(node["file"], sessions[0].block_tokens, (), str(salt), server, tokenizer, sessions,
                               dataclasses.replace(tree, per_request=salt == "request"))
        requests = read_trace(full, block, str(fmt))
    except TraceError as exc:
        check.fail(f"{path}.file", str(exc))
        return None
    return PrefixTrace(node["file"], block, tuple(requests), str(salt), server, tokenizer)


def _tree(node: dict, path: str, check: Checker) -> TreePlan:
    for key in ("bust", "start"):
        if key in node and node[key] not in TREE_CHOICES[key]:
            check.fail(f"{path}.{key}", f"must be one of {', '.join(map(str, TREE_CHOICES[key]))}; got {node[key]!r}")
    cap = check.number(node, "think_cap_s", path, 10.0, minimum=0, maximum=86_400)
    return TreePlan(bust=node.get("bust", "first_turn") == "first_turn", random_start=node.get("start") != "first",
                    think_cap_s=float(cap if cap is not None else 10.0))


def _tokenizer_file(path: str) -> bool:
    try:
        with open(path, encoding="utf-8") as f:
            obj = json.load(f)
    except (OSError, ValueError):
        return False
    return isinstance(obj, dict) and isinstance(obj.get("model"), dict)


def read_trace(path: str, block_tokens: int, fmt: str = "mooncake") -> list[TraceRequest]:
    """The trace's requests in file order, times in ms; every malformed line named (``checker.json_lines``) in one
    ``TraceError``. Bailian's ``chat_id``, ``parent_chat_id``, ``turn`` and ``type`` are checked where given: a
    turn's prefix comes from its ``hash_ids`` (its whole prompt, history included), so each line is sent as it is."""
    try:
        lines = json_lines(path, lambda obj: _problem(obj, block_tokens, fmt))
    except ValueError as exc:
        raise TraceError(f"{path}: {exc}") from None
    if not lines:
        raise TraceError(f"{path}: no request: one JSON object a line with {', '.join(_FIELDS)}")
    ms = _MS[fmt]
    return [TraceRequest(float(o["timestamp"]) * ms, o["input_length"], o["output_length"], tuple(o["hash_ids"]))
            for o in lines]


def _problem(obj: object, block_tokens: int, fmt: str) -> str | None:
    if not isinstance(obj, dict):
        return f"expected an object, got {type(obj).__name__}"
    missing = [k for k in _FIELDS if k not in obj]
    if missing:
        return f"missing {', '.join(missing)} (a {fmt} line has {', '.join(_FIELDS)})"
    for key in ("chat_id", "parent_chat_id", "turn"):  # Bailian's session fields, where given
        v = obj.get(key, 1)
        if isinstance(v, bool) or not isinstance(v, int) or v < (-1 if key == "parent_chat_id" else 0):
            return f"{key} must be an integer{' (-1: no parent)' if key == 'parent_chat_id' else ' >= 0'}, got {v!r}"
    t = obj["timestamp"]
    if isinstance(t, bool) or not isinstance(t, int | float) or not t >= 0:
        return f"timestamp must be a number of {'ms' if fmt == 'mooncake' else 's'} >= 0, got {t!r}"
    for key in ("input_length", "output_length"):
        v = obj[key]
        if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= MAX_TOKENS:
            return f"{key} must be an integer of tokens >= 1, got {v!r}"
    ids = obj["hash_ids"]
    if not isinstance(ids, list) or not all(isinstance(h, int) and not isinstance(h, bool) and h >= 0 for h in ids):
        return "hash_ids must be a list of integers >= 0"
    blocks = -(-obj["input_length"] // block_tokens)
    if len(ids) != blocks:
        return (f"{len(ids)} hash_ids for input_length {obj['input_length']}: {blocks} blocks of {block_tokens} "
                "tokens expected (is block_tokens the trace's?)")
    return None


def ideal_cached(requests: Sequence[TraceRequest], block_tokens: int, server_block: int, before: int = 0,
                 after: int = 0) -> list[int]:
    """Per request, in order, the prompt tokens an unbounded prefix cache could serve (``PrefixTrie.offer``)."""
    trie = PrefixTrie(block_tokens, server_block, before, after)
    return [trie.offer(req.hash_ids, req.input_tokens) for req in requests]


class PrefixTrie:
    """An unbounded prefix cache of the blocks offered so far: ``offer(keys, tokens)`` is a prompt's tokens it could
    serve — its longest prefix shared with an earlier prompt, in whole ``server_block``-token blocks, and never its
    last token (an engine computes at least one) — and then holds the prompt. Equal keys with a cut last block share
    up to the shorter cut. ``before`` and ``after``: template tokens around each prompt's text; those before are
    shared by every prompt after the first."""

    def __init__(self, block_tokens: int, server_block: int, before: int = 0, after: int = 0) -> None:
        self.block_tokens, self.server_block, self.before, self.after = block_tokens, server_block, before, after
        self.root: dict[Hashable, list] = {}  # key -> [longest text seen of the block (tokens), children]
        self.offered = 0

    def offer(self, keys: Sequence[Hashable], tokens: int) -> int:
        b = self.block_tokens
        common, level = 0, self.root
        for j, key in enumerate(keys):
            mine = min(b, tokens - j * b)
            node = level.get(key)
            if node is None:
                break
            common += min(mine, node[0])
            if node[0] < mine or mine < b:
                break
            level = node[1]
        shared = self.before + common if self.offered else 0
        self.offered += 1
        level = self.root
        for j, key in enumerate(keys):  # then it is in the cache
            mine = min(b, tokens - j * b)
            if mine <= 0:
                break
            node = level.setdefault(key, [0, {}])
            node[0] = max(node[0], mine)
            level = node[1]
        whole = self.before + tokens + self.after
        return min(shared, whole - 1) // self.server_block * self.server_block


def trace_salt(trace: PrefixTrace, run_id: str | None, seed: int) -> str:
    """The blocks' salt: the run's (every worker of a run the same, another run another), none with ``salt: none``
    (``request``: the run's, to which each request adds its own). A run without an id (plain Locust) salts by the
    seed alone."""
    if trace.salt == "none":
        return ""
    return hashlib.blake2b(f"{run_id or ''}/{seed}".encode(), digest_size=3).hexdigest()


class TraceCursor:
    """Which of the trace's requests a worker sends next: its share in file order (worker ``w`` of ``W``, as
    ``place()`` says when asked: every ``W``-th from ``w``), over again with another salt when it reaches the end (a
    fresh pass: new blocks)."""

    def __init__(self, trace: PrefixTrace, place: Callable[[], tuple[int, int]], before: int = 0,
                 after: int = 0) -> None:
        self.trace, self.place = trace, place
        self.ceiling = trace.ceiling(before, after)
        self.sent = 0

    def next(self) -> tuple[TraceRequest, int, int]:
        """The next request, its ideal cached tokens and its pass (0 first)."""
        worker, fleet = self.place()
        fleet = max(1, fleet)
        n = len(self.trace.requests)
        mine = max(1, (n - worker + fleet - 1) // fleet)  # this worker's share of the lines
        done, k = divmod(self.sent, mine)
        self.sent += 1
        i = min(n - 1, worker + k * fleet)
        return self.trace.requests[i], self.ceiling[i], done

