"""Where a process's requests go, resolved once per test: the base URL, its TLS settings, the API key and the headers.

Every part of a worker that talks to the endpoint (the users, the probes, the trace's ``/tokenize``) and the master's
scraper read the one ``Target`` instead of working the same settings out again (``--host`` over ``endpoint.host``,
``--insecure`` over ``endpoint.tls.verify``, the key's and headers' environment variables).
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Mapping
from dataclasses import dataclass

from harness.client.connection import Connection, tls_context
from harness.endpoint import DEFAULT_HOST, Endpoint, header_values

__all__ = ["Target"]


@dataclass(frozen=True, kw_only=True)
class Target:
    base: str
    """The endpoint's base URL: ``--host``, else ``endpoint.host``, else the simulator's default address."""
    ca_file: str | None = None
    verify: bool = True
    """Check the endpoint's certificate: ``endpoint.tls.verify``, unless ``--insecure``."""
    api_key: str | None = None
    """The value of ``endpoint.api_key_env``'s variable; None without one (or when it is unset)."""
    headers: Mapping[str, str]
    """``endpoint.headers``, their environment references read."""

    @classmethod
    def of(cls, ep: Endpoint, host: str | None, *, insecure: bool,
           environ: Mapping[str, str] = os.environ) -> Target:
        """``ep``'s target; ``host``: ``--host`` (Locust's, or ``kneecap run``'s), which wins over ``ep.host``."""
        return cls(base=host or ep.host or DEFAULT_HOST, ca_file=ep.tls.ca_file, verify=ep.tls.verify and not insecure,
                   api_key=environ.get(ep.api_key_env) if ep.api_key_env else None,
                   headers=header_values(ep.headers, environ))

    @property
    def https(self) -> bool:
        return self.base.startswith("https:")

    def connection(self) -> Connection:
        """A new keep-alive connection to the base URL."""
        return Connection(self.base, ca_file=self.ca_file, verify=self.verify)

    def tls(self) -> ssl.SSLContext:
        """The TLS context of its settings, for a one-off https call (made once per settings; the CAs load then)."""
        return tls_context(self.ca_file, self.verify)

    def auth_headers(self) -> dict[str, str]:
        """The headers of a one-off call: ``headers`` and, with a key, its ``Authorization: Bearer``."""
        return {**self.headers, **({"Authorization": f"Bearer {self.api_key}"} if self.api_key else {})}
