"""Where the requests go: the scenario's ``endpoint`` section, its URL rules and TLS settings. Pure.

Part of the scenario (``harness/scenario.py`` parses the rest); the schema is in ``scenarios/README.md``.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from harness.checker import Checker
from harness.spec.adapters import AdapterSpec, adapters_from_spec
from harness.spec.timeouts import Timeouts

__all__ = ["APIS", "DEFAULT_HOST", "RETRY_AFTER", "USAGE_PER_CHUNK", "Endpoint", "Tls", "header_values",
           "parse_endpoint", "parse_headers", "url_problem"]

APIS = ("chat", "completions", "responses", "messages", "embeddings")
"""chat (/v1/chat/completions), completions (/v1/completions), responses (OpenAI Responses, /v1/responses),
messages (Anthropic Messages, /v1/messages), embeddings (/v1/embeddings)."""
USAGE_PER_CHUNK = ("auto", "on", "off")
RETRY_AFTER = ("honor", "ignore")

DEFAULT_HOST = "http://127.0.0.1:8000"
"""Where requests go when neither --host nor endpoint.host says (``kneecap sim``'s default address)."""


def url_problem(url: str) -> str | None:
    """What is wrong with ``url`` as an endpoint's base URL, or None: http(s), a host name, a port in 1–65535.

    IPv6 literals go in brackets (``http://[::1]:8000``); a path is kept (``https://host/openai``); a
    query, a fragment or credentials are refused, because requests would silently drop them.
    """
    example = "such as http://127.0.0.1:8000 or https://llm.example.com"
    if any(ch.isspace() for ch in url):
        return f"expected a URL without spaces, {example}; got {url!r}"
    try:
        u = urlsplit(url)
    except ValueError as exc:  # an unclosed IPv6 bracket
        return f"expected a URL {example}; got {url!r} ({exc})"
    if u.scheme not in ("http", "https") or not url.lower().startswith(("http://", "https://")):
        hint = f"; did you mean 'http://{url}'?" if "://" not in url else ""
        return f"expected a URL starting with http:// or https://, got {url!r}{hint}"
    try:
        port = u.port
    except ValueError as exc:
        hint = "; an IPv6 address goes in brackets: http://[::1]:8000" if url.count(":") > 2 else ""
        return f"bad port in {url!r} ({exc}){hint}"
    if not u.hostname:
        return f"expected a host name after {u.scheme}://, {example}; got {url!r}"
    if port == 0:
        return f"bad port in {url!r}: expected 1-65535, got 0"
    if u.username is not None or u.password is not None:
        return (f"credentials in the URL {u.scheme}://{u.hostname}...: secrets never go in the URL; name the "
                "variable holding the API key with endpoint.api_key_env")
    if u.query or u.fragment or url.endswith(("?", "#")):
        return f"expected a base URL without ?query or #fragment (requests would drop them), got {url!r}"
    return None


@dataclass(frozen=True, kw_only=True)
class Tls:
    """How HTTPS endpoints are verified (``endpoint.tls``); plain http:// ignores it."""

    ca_file: str | None = None
    """A PEM bundle of the certificate authorities to trust (a private CA), as an absolute path; None: the system's."""
    verify: bool = True
    """False: accept any certificate (a test endpoint with a self-signed one); never together with ``ca_file``."""


@dataclass(frozen=True, kw_only=True)
class Endpoint:
    host: str | None = None
    """None: ``kneecap run`` starts the built-in simulator; plain Locust uses DEFAULT_HOST."""
    api: str = "chat"
    model: str = "sim-small"
    api_key_env: str | None = None
    ignore_eos: bool = True
    extra_body: dict = field(default_factory=dict)
    timeouts: Timeouts = field(default_factory=Timeouts.defaults)
    """The limits left unset grow with the prompt (``spec/timeouts.py``)."""
    metrics: str = "auto"
    """The server's Prometheus metrics: "auto" (HOST/metrics if it answers), "off", or a URL."""
    tls: Tls = field(default_factory=Tls)
    retry_after: str = "honor"
    """A 429's ``Retry-After``: "honor" (that user waits that long before its next request) or "ignore"."""
    stream: bool = True
    """False: classic request/response (E2E and time to headers only, tokens from usage); embeddings never stream."""
    continuous_usage: str = "auto"
    """chat/completions streams: ask for usage on every chunk (``stream_options.continuous_usage_stats``, vLLM and
    SGLang) so each chunk's token count is exact. "auto": ask, and stop asking when the server refuses it."""
    headers: dict[str, str | dict] = field(default_factory=dict)
    """Extra request headers (gateways); values given as ``{env: NAME}`` are read from the environment at start."""
    anthropic_version: str = "2023-06-01"
    """``messages``: the ``anthropic-version`` header."""
    adapters: AdapterSpec | None = None
    """LoRA adapters of ``model``: each request names one (``spec/adapters.py``); None: ``model`` itself."""

    @property
    def path(self) -> str:
        """The API's path below the base URL."""
        return {"chat": "/v1/chat/completions", "completions": "/v1/completions", "responses": "/v1/responses",
                "messages": "/v1/messages", "embeddings": "/v1/embeddings"}[self.api]


def parse_endpoint(node: Any, check: Checker) -> Endpoint:
    """The scenario's ``endpoint`` section, every problem reported to ``check``."""
    keys = ("host", "api", "model", "api_key_env", "ignore_eos", "extra_body", "timeouts", "metrics", "tls",
            "retry_after", "stream", "continuous_usage", "headers", "anthropic_version", "adapters")
    d = Endpoint()
    if check.mapping(node, "endpoint", keys) is None:
        return d
    host = check.string(node, "host", "endpoint", d.host)
    if host and (problem := url_problem(host)):
        check.fail("endpoint.host", problem)
    extra = node.get("extra_body", {})
    if not isinstance(extra, dict):
        check.fail("endpoint.extra_body", "expected a mapping of fields merged into every request body")
    t, td = node.get("timeouts", {}), Timeouts.defaults()
    timeouts = td
    if check.mapping(t, "endpoint.timeouts", ("connect_s", "ttft_s", "idle_s", "total_s")) is not None:
        timeouts = Timeouts(**{k: check.number(t, k, "endpoint.timeouts", getattr(td, k), above=0)
                               for k in ("connect_s", "ttft_s", "idle_s", "total_s")},
                            scale_with_prompt=td.scale_with_prompt - set(t))  # a limit set stays as set
    return Endpoint(host=host, api=check.string(node, "api", "endpoint", d.api, choices=APIS),
                    model=check.string(node, "model", "endpoint", d.model),
                    api_key_env=check.string(node, "api_key_env", "endpoint", None),
                    ignore_eos=check.boolean(node, "ignore_eos", "endpoint", d.ignore_eos),
                    extra_body=extra if isinstance(extra, dict) else {}, timeouts=timeouts,
                    metrics=_metrics(node, check), tls=_tls(node.get("tls", {}), check),
                    retry_after=check.string(node, "retry_after", "endpoint", d.retry_after, choices=RETRY_AFTER),
                    stream=check.boolean(node, "stream", "endpoint", d.stream),
                    continuous_usage=check.string(node, "continuous_usage", "endpoint", d.continuous_usage,
                                                  choices=USAGE_PER_CHUNK),
                    headers=parse_headers(node.get("headers", {}), check),
                    anthropic_version=check.string(node, "anthropic_version", "endpoint", d.anthropic_version),
                    adapters=adapters_from_spec(node["adapters"], "endpoint.adapters", check) if "adapters" in node
                    else None)


_TOKEN = set("!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")


def parse_headers(node: Any, check: Checker, path: str = "endpoint.headers") -> dict[str, str | dict]:
    """``{Name: value}`` or ``{Name: {env: VAR}}`` (a secret: read from the environment when the run starts)."""
    if not isinstance(node, dict):
        check.fail(path, "expected a mapping of header names to values or {env: VARIABLE}")
        return {}
    out: dict[str, str | dict] = {}
    for name, value in node.items():
        where = f"{path}.{name}"
        if not isinstance(name, str) or not name or not set(name) <= _TOKEN:
            check.fail(path, f"{name!r} is not an HTTP header name (letters, digits, - and _)")
            continue
        if name.lower() in ("host", "content-length", "content-type", "transfer-encoding", "connection"):
            check.fail(where, "kneecap sets this header itself; remove it")
            continue
        if isinstance(value, dict):
            if check.mapping(value, where, ("env",), ("env",)) is None or not isinstance(value.get("env"), str):
                continue
            out[name] = {"env": value["env"]}  # resolved by ``header_values`` when the run starts
        elif isinstance(value, (str, int, float)) and not isinstance(value, bool) and "\n" not in str(value) \
                and "\r" not in str(value):
            out[name] = str(value)
        else:
            check.fail(where, f"expected a value (one line) or {{env: VARIABLE}}, got {value!r}")
    return out


def header_values(headers: dict[str, str | dict], environ: Mapping[str, str]) -> dict[str, str]:
    """The headers to send: ``{env: VAR}`` values from ``environ`` (a missing variable sends no header)."""
    out = {}
    for name, value in headers.items():
        if isinstance(value, dict):
            if value["env"] in environ:
                out[name] = environ[value["env"]]
        else:
            out[name] = value
    return out


def _metrics(node: dict, check: Checker) -> str:
    if node.get("metrics") is False:  # YAML 1.1 reads a bare off as false
        return "off"
    value = check.string(node, "metrics", "endpoint", "auto")
    if value not in (None, "auto", "off") and (problem := url_problem(value)):
        check.fail("endpoint.metrics", f"expected auto, off or an http(s) URL: {problem}")
    return value or "auto"


def _tls(node: Any, check: Checker) -> Tls:
    d = Tls()
    if check.mapping(node, "endpoint.tls", ("ca_file", "verify")) is None:
        return d
    verify = check.boolean(node, "verify", "endpoint.tls", d.verify)
    ca_file = check.file(node, "ca_file", "endpoint.tls") if "ca_file" in node else None
    if "ca_file" in node and not verify:
        check.fail("endpoint.tls", "ca_file says which certificates to trust, verify: false trusts any: give "
                                   "one of them (ca_file for a private CA, verify: false only for a test endpoint)")
        return d
    if ca_file is not None:
        try:  # the same call the client makes, so a bundle accepted here is one the client can load
            ssl.create_default_context().load_verify_locations(cafile=ca_file)
        except (ssl.SSLError, ValueError, OSError) as exc:
            check.fail("endpoint.tls.ca_file", f"{node['ca_file']} is not a PEM bundle of CA certificates "
                                               f"({getattr(exc, 'reason', None) or exc}); give the CA's certificate "
                                               "in PEM form (-----BEGIN CERTIFICATE-----)")
            ca_file = None
    return Tls(ca_file=ca_file, verify=verify)
