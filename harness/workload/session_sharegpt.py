"""ShareGPT conversations replayed as sessions (``sessions: {log: FILE, format: sharegpt}``). Pure.

A ShareGPT file is one JSON list of ``{"conversations": [{"from": "human", "value": ...}, {"from": "gpt", ...},
...]}`` (``human``/``user`` for the user, ``gpt``/``assistant`` for the model). Each conversation becomes one
session of ``ScriptedTurn``\\ s: every user message is a turn whose new message is **that message's text** (sent as
it is, after the session's nonce on turn 1), with the whole conversation so far before it, as sessions send; the
model message after it gives the turn's output length (``max_tokens``). The answers in the history are the
server's, as in every session: the file's model texts give only their lengths.

Lengths are a word estimate: one token per whitespace-separated word (at least 1), the ratio the prompt builder
starts from before the server reports usage and the simulator's default ``--tokens-per-word 1``. A turn's
``input_tokens`` is its message's estimate (it sizes ``max_context_tokens``; the text is sent whatever it is).

- Skipped and counted (``SessionLog.notes``), as ShareGPT files as published hold them: an empty conversation, one
  the model opens, one with another role (``system``, ``bing``, ...), one where a side speaks twice in a row, one
  with an empty user message. A last user message without an answer is left out (counted); a conversation with
  nothing left is skipped. An empty model message is an answer of 1 token (counted).
- Refused, every bad item named (``TraceError``; under ``kneecap run`` at ``workload.sessions.log``, exit 2): an
  item without a ``conversations`` list, a message that is not an object with text ``from`` and ``value``; a file
  with no conversation to replay.

No think time is logged: 0 unless the scenario draws one (``think_time_s``, allowed with this format).
"""

from __future__ import annotations

import itertools

from harness.workload.prompt_file import HUMAN, listed, sharegpt_conversations
from harness.workload.session_log import ScriptedTurn, SessionLog
from harness.workload.traces import TraceError, _text

__all__ = ["MODEL", "load_sharegpt_sessions", "word_tokens"]

MODEL = ("gpt", "assistant")
"""ShareGPT's name for the model's messages (``from``), and the name some exports use instead."""
_SKIPS = {"empty": "empty", "model_first": "opened by the model", "other_role": "with another role than "
          "human/user and gpt/assistant", "repeat": "with one side twice in a row", "blank": "with an empty user "
          "message", "no_answer": "with no answered user message"}


def word_tokens(text: str) -> int:
    """The word estimate of ``text``'s tokens: whitespace-separated words, at least 1."""
    return max(1, len(text.split()))


def _bad_messages(conversation: list) -> list[int]:
    return [j for j, m in enumerate(conversation) if not isinstance(m, dict)
            or not isinstance(m.get("from"), str) or not isinstance(m.get("value"), str)]


def _skip(conversation: list) -> str | None:
    """Why ``conversation`` (its messages well formed) cannot be replayed, as a ``_SKIPS`` key; None: it can."""
    roles = [m["from"].lower() for m in conversation]
    if not roles:
        return "empty"
    if any(r not in HUMAN and r not in MODEL for r in roles):
        return "other_role"
    if roles[0] in MODEL:
        return "model_first"
    if any((a in HUMAN) == (b in HUMAN) for a, b in itertools.pairwise(roles)):
        return "repeat"
    if any(r in HUMAN and not m["value"].strip() for r, m in zip(roles, conversation, strict=True)):
        return "blank"
    if len(roles) < 2:
        return "no_answer"
    return None


def _script(conversation: list, counts: dict[str, int]) -> tuple[tuple[ScriptedTurn, ...], int]:
    """The turns of a conversation that alternates user, model, ...; and its final context (word estimate)."""
    turns, context = [], 0
    for k in range(0, len(conversation) - 1, 2):
        text, answer = conversation[k]["value"].strip(), conversation[k + 1]["value"]
        n_in, n_out = word_tokens(text), word_tokens(answer)
        counts["zero"] += not answer.split()
        context += n_in + n_out
        turns.append(ScriptedTurn(n_in, n_out, text=text))
    counts["unanswered"] += len(conversation) % 2
    return tuple(turns), context


def load_sharegpt_sessions(path: str) -> SessionLog:
    """The conversations of the ShareGPT file ``path`` as sessions (rules in the module docstring)."""
    conversations, no_list, items = sharegpt_conversations(path, _text(path))
    bad: list[str] = []
    scripts, ids, biggest = [], [], 0
    counts = dict.fromkeys((*_SKIPS, "zero", "unanswered"), 0)
    for i, item, conversation in conversations:
        wrong = _bad_messages(conversation)
        if wrong:
            bad.extend(f"item {i} message {j}" for j in wrong)
            continue
        why = _skip(conversation)
        if why is not None:
            counts[why] += 1
            continue
        script, context = _script(conversation, counts)
        scripts.append(script)
        ids.append(str(item["id"]) if isinstance(item.get("id"), str | int) else str(i))
        biggest = max(biggest, context)
    _refuse(path, items, no_list, bad, scripts)
    return SessionLog(tuple(scripts), tuple(ids), "new", False, None, {"format": "sharegpt"}, biggest,
                      notes=_notes(counts))


def _refuse(path: str, items: int, no_list: list[int], bad: list[str], scripts: list) -> None:
    found = []
    if no_list:
        found.append(f"{len(no_list)} item{'s' if len(no_list) > 1 else ''} without a 'conversations' list "
                     f"(items {listed(no_list)})")
    if bad:
        shown = ", ".join(bad[:5]) + (f" and {len(bad) - 5} more" if len(bad) > 5 else "")
        found.append(f"{len(bad)} message{'s' if len(bad) > 1 else ''} not an object with text 'from' and 'value' "
                     f"({shown})")
    if found:
        raise TraceError(f"{path}: {'; '.join(found)}, counting from 0; a ShareGPT file is one JSON list of "
                         '{"conversations": [{"from": "human", "value": "..."}, {"from": "gpt", ...}, ...]}')
    if not scripts:
        raise TraceError(f"{path}: no conversation to replay as a session ({items} conversations; each needs a "
                         "human turn answered by a gpt turn, the human first)")


def _notes(counts: dict[str, int]) -> tuple[str, ...]:
    out = [f"{counts[k]} conversation{'s' if counts[k] > 1 else ''} {what}: skipped"
           for k, what in _SKIPS.items() if counts[k]]
    for key, what in (("unanswered", "last user message{} without an answer: left out"),
                      ("zero", "empty model message{}: an answer of 1 token")):
        if counts[key]:
            out.append(f"{counts[key]} {what.format('s' if counts[key] > 1 else '')}")
    out.append("lengths are word estimates (1 token a word); no think time is logged")
    return tuple(out)
