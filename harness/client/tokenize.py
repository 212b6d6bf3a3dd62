"""The endpoint's tokenizer, for token-exact trace blocks (``workload/token_blocks.py``): over HTTP, vLLM's ``POST
/tokenize``, one blocking call per question before the load begins (a server whose answer lacks the tokens' pieces
leaves the blocks approximate, saying so); or from a local ``tokenizer.json`` (Hugging Face's ``tokenizers``), which
knows no chat template.

The request: ``{"model", "prompt" | "messages", "add_special_tokens", "return_token_strs": true}``; the answer's
``tokens`` (ids) and ``token_strs`` (pieces). Chat messages are tokenized with the chat template and the generation
prompt, as a chat request's prompt is.
"""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request

from harness.workload.token_blocks import Tokenize

__all__ = ["file_tokenizer", "server_tokenizer"]


def file_tokenizer(path: str) -> Tokenize:
    """A ``Tokenize`` by the ``tokenizer.json`` at ``path``; chat messages are their contents joined (no template).
    Raises ``ValueError`` naming the file when it is not a tokenizer."""
    from tokenizers import Tokenizer  # only a trace with a tokenizer file needs it

    try:
        tok = Tokenizer.from_file(path)
    except Exception as exc:  # the library raises its own Exception for any unreadable file
        raise ValueError(f"{path}: not a tokenizer.json ({exc})") from None

    def tokenize(what: str | list[dict], special: bool) -> tuple[list[int], list[str] | None]:
        text = what if isinstance(what, str) else " ".join(str(m.get("content", "")) for m in what)
        enc = tok.encode(text, add_special_tokens=special or not isinstance(what, str))
        return list(enc.ids), list(enc.tokens)

    return tokenize


def server_tokenizer(host: str, model: str | None, *, headers: dict[str, str], context: ssl.SSLContext | None,
                     timeout_s: float = 5.0) -> Tokenize:
    """A ``Tokenize`` asking ``{host}/tokenize``; it raises ``OSError`` (no answer, an HTTP error) or ``ValueError``
    (an answer that is not a tokenization)."""
    url = host.rstrip("/") + "/tokenize"

    def tokenize(what: str | list[dict], special: bool) -> tuple[list[int], list[str] | None]:
        body: dict = {"model": model} if model else {}
        if isinstance(what, str):
            body.update(prompt=what, add_special_tokens=special)
        else:
            body.update(messages=what, add_generation_prompt=True)
        body["return_token_strs"] = True
        req = urllib.request.Request(url, json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json", **headers})
        try:
            with urllib.request.urlopen(req, timeout=timeout_s, context=context) as resp:
                answer = json.loads(resp.read(16 << 20))
        except urllib.error.HTTPError as exc:
            raise OSError(f"{url} answered HTTP {exc.code}") from None
        except json.JSONDecodeError:
            raise ValueError(f"{url} answered with no JSON") from None
        if not isinstance(answer, dict):
            raise ValueError(f"{url} answered {type(answer).__name__}, not an object")
        ids, pieces = answer.get("tokens"), answer.get("token_strs")
        if not isinstance(ids, list) or not all(isinstance(i, int) for i in ids):
            raise ValueError(f"{url} answered without a list of token ids")
        ok = isinstance(pieces, list) and len(pieces) == len(ids) and all(isinstance(p, str) for p in pieces)
        return ids, pieces if ok else None

    return tokenize
