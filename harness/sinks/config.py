"""Where the InfluxDB sink writes: one typed setting, with its defaults defined once. Pure (no client import).

``--influx-url`` (with ``--influx-org``/``--influx-bucket``/``--influx-token-env``, on ``kneecap run``
and on Locust's command line) wins over the scenario's ``sinks.influxdb``; tokens come from the environment only,
never from a flag or a scenario: the variable ``token_env`` names, or the file its ``NAME_FILE`` variable names
(Docker's secrets convention: compose hands the master a write-only token that way).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["DEFAULT_BUCKET", "DEFAULT_ORG", "DEFAULT_TOKEN_ENV", "DEFAULT_WINDOW_S", "InfluxConfig"]

DEFAULT_ORG = "kneecap"
DEFAULT_BUCKET = "kneecap"
DEFAULT_TOKEN_ENV = "INFLUX_TOKEN"
DEFAULT_WINDOW_S = 5.0


@dataclass(frozen=True, kw_only=True)
class InfluxConfig:
    url: str
    """Empty when the scenario names a ``url_env`` that is not set: then nothing is written (and a warning)."""
    org: str = DEFAULT_ORG
    bucket: str = DEFAULT_BUCKET
    token_env: str | None = DEFAULT_TOKEN_ENV
    window_s: float = DEFAULT_WINDOW_S
    """Seconds per live window (one set of points each)."""

    @property
    def token(self) -> str | None:
        """``$token_env``, else the contents of the file ``$token_env_FILE`` names (whitespace around it dropped);
        an unreadable file: ValueError naming it."""
        if not self.token_env:
            return None
        value = os.environ.get(self.token_env)
        path = os.environ.get(f"{self.token_env}_FILE")
        if value or not path:
            return value
        try:
            with open(path, encoding="utf-8") as f:
                return f.read().strip()
        except OSError as exc:
            raise ValueError(f"{self.token_env}_FILE={path}: cannot read the InfluxDB token ({exc.strerror})") from None

    @classmethod
    def resolve(cls, options: Any, scenario_influx: Mapping[str, Any] | None) -> InfluxConfig | None:
        """The flags' setting, else the scenario's; None when neither asks for InfluxDB."""
        url = getattr(options, "influx_url", "") if options is not None else ""
        if url:
            return cls(url=url, org=options.influx_org, bucket=options.influx_bucket,
                       token_env=options.influx_token_env)
        if not scenario_influx:
            return None
        c = scenario_influx
        return cls(url=c.get("url") or os.environ.get(c.get("url_env", ""), ""), org=c["org"], bucket=c["bucket"],
                   token_env=c.get("token_env"), window_s=float(c["window_s"]))
