"""Why requests failed, in words for the console: the top failure classes with a sample each, and a likely fix. Pure.

The classes are the client's (README, "Metrics"); the sample is the first detail seen for the class
(e.g. "cannot connect to 127.0.0.1:9: Connection refused"); hints name the option that fixes the usual cause.
"""

from __future__ import annotations

from harness.metrics.aggregate import Bucket

__all__ = ["hint", "top_failures"]

_HINTS = {
    "connect_error": "is the endpoint up? check --host / endpoint.host",
    "connect_timeout": "the endpoint does not accept connections in time: check --host, or raise "
                       "endpoint.timeouts.connect_s",
    "tls_error": "trust the server's CA with endpoint.tls.ca_file, or skip verification (endpoint.tls.verify: "
                 "false, or --insecure)",
    "ttft_timeout": "no first token in time: the endpoint is overloaded, or raise endpoint.timeouts.ttft_s",
    "not_sse": "the endpoint did not stream: check the URL path (endpoint.api) and that it speaks OpenAI's API",
    "http_429": "the endpoint rate-limits: lower the load, or raise its limit",
    "context_overflow": "the prompts and answers do not fit the model's context: a shorter workload, or a server "
                        "with a longer max model length",
}


def hint(error: str, detail: str = "") -> str | None:
    """The likely fix for a failure class (and its sample detail), or None when there is no usual cause."""
    if error == "http_4xx":
        if detail.startswith(("HTTP 401", "HTTP 403")):
            return "the endpoint refused the credentials: set the API key variable named by endpoint.api_key_env"
        if detail.startswith("HTTP 404"):
            return "not found: check the path (endpoint.api: chat | completions) and endpoint.model"
        if detail.startswith(("HTTP 400", "HTTP 422")):
            return "the endpoint refused the request: check endpoint.model, endpoint.extra_body and the lengths"
        return None
    return _HINTS.get(error)


def top_failures(bucket: Bucket, n: int = 2) -> str:
    """e.g. "connect_error 100%: cannot connect to 127.0.0.1:9: Connection refused" ("" when nothing failed)."""
    if not bucket.requests or not bucket.failures:
        return ""
    parts = []
    for error, count in sorted(bucket.failures.items(), key=lambda kv: -kv[1])[:n]:
        sample = bucket.failure_samples.get(error)
        parts.append(f"{error} {100 * count / bucket.requests:.0f}%" + (f": {sample}" if sample else ""))
    return "; ".join(parts)
