"""What the simulated model writes: one vocabulary word per output token. Pure: no I/O.

Every framing renders the same tokens, so a client's assembled text is predictable:

- answer token j (0-based within the answer) is ``" " + VOCAB[j % len(VOCAB)]`` — the text of a request
  without reasoning is unchanged by a reasoning phase in front of it;
- reasoning token i is ``" " + VOCAB[i % len(VOCAB)]`` in a reasoning field (chat ``reasoning_content``,
  Responses reasoning text, Anthropic ``thinking``); in the completions framing, which has no such field,
  reasoning token 0 is ``"<think>"`` and the last one ``"</think>"`` (a raw reasoning model's output);
- a request that asked ``response_format`` JSON gets ``{"answer":" w1 w2 ..."}``, one fragment per token;
- a tool call's arguments are JSON built one fragment per token: ``{"input":"``, then words, then ``"}``,
  so the arguments of a call the model finished are valid JSON and those cut by ``max_tokens`` are not.
"""

from __future__ import annotations

import json

__all__ = ["THINK_END", "THINK_START", "VOCAB", "json_answer", "output_words", "plain_text", "think_text", "token_text",
           "tool_arguments", "tool_fragment"]

VOCAB = tuple(
    "the of and to in a is that for it as was with be by on not he this are or his from at which but have "
          "an had they you were their one all we can her has there been if more when will would who so no she "
          "other its may these about than into them only new some could time two first then do any like my now "
          "over such our man me even most made after also did many before must through back years where much "
          "your way well down should because each just those people how too little state good very make world "
          "still own see men work long get here between both life being under never day same another know while "
          "last might us great old year off come since against go came right used take three".split()
)
_VOCAB_JSON = [json.dumps(" " + w).encode() for w in VOCAB]
THINK_START = "<think>"
THINK_END = "</think>"
_ARGS_OPEN = '{"input":"'
_ARGS_CLOSE = '"}'


def token_text(index: int, count: int = 1, changed_from: int | None = None) -> bytes:
    """JSON string (quoted) of ``count`` output tokens starting at ``index``: one word per token. ``changed_from``:
    the answer changes from that token on (each word the next one of the vocabulary: ``--changed-answers-share``)."""
    if changed_from is not None and index + count > changed_from:
        return json.dumps(plain_text(count, index, changed_from)).encode()
    if count == 1:
        return _VOCAB_JSON[index % len(_VOCAB_JSON)]
    return json.dumps("".join(" " + VOCAB[(index + i) % len(VOCAB)] for i in range(count))).encode()


def json_answer(index: int, count: int, total: int, cut: bool = False) -> str:
    """Answer tokens ``[index, index + count)`` of a JSON answer of ``total`` tokens (a request that asked
    ``response_format`` JSON): ``{"answer":"``, words, then ``"}``; ``cut``: the last token is a word too, so the JSON
    never closes (an answer cut short: ``--malformed-json-share``)."""
    out = []
    for j in range(index, index + count):
        if j == 0:
            out.append('{"answer":"' if total > 1 else "{" if cut else "{}")
        elif j == total - 1 and not cut:
            out.append('"}')
        else:
            out.append(" " + VOCAB[j % len(VOCAB)])
    return "".join(out)


def plain_text(count: int, start: int = 0, changed_from: int | None = None) -> str:
    """The text of ``count`` output tokens from ``start`` (``plain_text(n)``: a non-streaming answer), changed from
    token ``changed_from`` on as ``token_text``'s."""
    if changed_from is None:
        return "".join(" " + VOCAB[i % len(VOCAB)] for i in range(start, start + count))
    return "".join(" " + VOCAB[(i + (i >= changed_from)) % len(VOCAB)] for i in range(start, start + count))


def output_words(count: int) -> list[str]:
    """``plain_text(count).split()``, fast: the output's units for the prefix cache."""
    return list(VOCAB * (count // len(VOCAB)) + VOCAB[:count % len(VOCAB)])


def think_text(index: int, count: int, total: int) -> str:
    """Reasoning tokens ``[index, index + count)`` of ``total`` as raw model text (the completions framing)."""
    out = []
    for i in range(index, index + count):
        if i == 0:
            out.append(THINK_START + (THINK_END if total == 1 else ""))
        elif i == total - 1:
            out.append(THINK_END)
        else:
            out.append(" " + VOCAB[i % len(VOCAB)])
    return "".join(out)


def tool_fragment(j: int, planned: int) -> str:
    """Fragment ``j`` of a tool call's arguments planned as ``planned`` fragments (one per token)."""
    if planned == 1:
        return "{}"
    if j == 0:
        return _ARGS_OPEN
    if j == planned - 1:
        return _ARGS_CLOSE
    return (" " if j > 1 else "") + VOCAB[(j - 1) % len(VOCAB)]


def tool_arguments(count: int, planned: int, start: int = 0) -> str:
    """Fragments ``[start, start + count)`` of ``planned`` joined: ``tool_arguments(p, p)`` is the whole string."""
    return "".join(tool_fragment(j, planned) for j in range(start, start + count))


def segment_payload(phase: str, first: int, count: int, args_planned: int) -> bytes | None:
    """The JSON text one delta event of a typed-event framing (Responses, Anthropic) carries for ``count`` tokens
    from ``first`` of a ``phase``: tool-call arguments (the name is the tool phase's first token, so it carries
    none; None when nothing is left), else answer or reasoning words."""
    if phase == "tool":
        n = count - 1 if first == 0 else count
        return json.dumps(tool_arguments(n, args_planned, 0 if first == 0 else first - 1)).encode() if n else None
    return token_text(first, count)
