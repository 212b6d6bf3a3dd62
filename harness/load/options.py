"""kneecap's Locust command-line options: one typed object that adds itself to Locust's parser and writes argv.

``KneecapOptions`` is the process boundary between ``kneecap run`` (which starts the master) and the
master's Locust: each field is one option, declared once in ``OPTIONS`` (flag, help, whether Locust's web
UI shows it); ``add_arguments`` puts them on Locust's parser (they also work from ``locust.conf``) and
``to_argv`` writes the flags a master is started with. Custom options reach workers with the master's spawn
message, so workers read them at test start. ``--overrides`` and ``--run-id`` are command line and
``locust.conf`` only: the web UI does not show them.
"""

from __future__ import annotations

import ipaddress
import json
from dataclasses import dataclass, field, fields
from typing import Any

from harness.sinks.config import DEFAULT_BUCKET, DEFAULT_ORG, DEFAULT_TOKEN_ENV

__all__ = ["WEB_HOST", "KneecapOptions", "add_arguments", "web_bind_problem"]


WEB_HOST = "127.0.0.1"
"""Where kneecap's web UI listens unless told otherwise (``--web-host 0.0.0.0`` or ``LOCUST_WEB_HOST``): Locust
listens on every interface without authentication, and the UI can start and stop load and shows the results."""


def web_bind_problem(web_host: str | None, *, web_login: bool, web_insecure: bool) -> str | None:
    """Why the web UI must not listen on ``web_host`` as asked, or None: beyond loopback it needs a login
    (Locust's ``--web-login``) or an explicit ``--web-insecure``; the UI can start and stop load."""
    host = (web_host or "*").strip("[]")
    if web_login or web_insecure or host == "localhost":
        return None
    try:
        if host != "*" and ipaddress.ip_address(host).is_loopback:
            return None
    except ValueError:  # a host name: it may resolve anywhere
        pass
    where = "every interface" if host in ("*", "0.0.0.0", "::") else host
    return (f"--web-host {web_host or '*'}: the web UI would listen on {where} without a login, and it can start and "
            "stop load; add --web-login (with Locust's authentication set up), or --web-insecure to accept that "
            "behind your own access control, or drop --web-host (127.0.0.1)")


def _opt(default: Any, help: str, *, web_ui: bool = True) -> Any:
    return field(default=default, metadata={"help": help, "web_ui": web_ui})


@dataclass(frozen=True, kw_only=True)
class KneecapOptions:
    """kneecap's options as the master's Locust reads them (``--scenario`` is ``scenario``, and so on)."""

    scenario: str = _opt("", "Scenario YAML file (default: the built-in chat scenario).")
    results_dir: str = _opt("", "Where summary.json goes [scenario sinks.results_dir].")
    save_requests: str = _opt("", "Write every request record as JSON lines to this file (gathered on the master).")
    overrides: str = _opt("", "Scenario overrides as a JSON object of dotted keys, e.g. '{\"workload.seed\": 3}'.",
                          web_ui=False)
    influx_url: str = _opt("", "Write live results to this InfluxDB 2 [scenario sinks].")
    influx_org: str = _opt(DEFAULT_ORG, "InfluxDB organisation.")
    influx_bucket: str = _opt(DEFAULT_BUCKET, "InfluxDB bucket.")
    influx_token_env: str = _opt(DEFAULT_TOKEN_ENV, "Name of the environment variable holding the InfluxDB token.")
    run_id: str = _opt("", "Run identifier [timestamp-based].", web_ui=False)
    insecure: bool = _opt(False, "Accept any TLS certificate from the endpoint (overrides endpoint.tls.verify).")
    web_insecure: bool = _opt(False, "Let the web UI listen beyond loopback without a login (--web-host 0.0.0.0 "
                              "behind your own access control).", web_ui=False)

    @staticmethod
    def flag(name: str) -> str:
        return "--" + name.replace("_", "-")

    @staticmethod
    def overrides_json(overrides: dict[str, Any]) -> str:
        """``--overrides``'s value for a dict of dotted keys ("" for none)."""
        return json.dumps(overrides) if overrides else ""

    def to_argv(self) -> list[str]:
        """The flags that give a master these options; options left at their default are not written."""
        argv: list[str] = []
        for f in fields(self):
            value = getattr(self, f.name)
            if value == f.default:
                continue
            argv += [self.flag(f.name)] if isinstance(value, bool) else [self.flag(f.name), str(value)]
        return argv


def add_arguments(parser: Any) -> None:
    """Locust's ``init_command_line_parser`` listener: every ``KneecapOptions`` field as an option."""
    parser.set_defaults(web_host=WEB_HOST)
    for f in fields(KneecapOptions):
        # On the parser itself, not a group: only Locust's parser knows include_in_web_ui.
        extra = {} if f.metadata["web_ui"] else {"include_in_web_ui": False}
        if f.type in (bool, "bool"):
            parser.add_argument(KneecapOptions.flag(f.name), action="store_true", default=f.default,
                                help=f.metadata["help"], **extra)
        else:
            parser.add_argument(KneecapOptions.flag(f.name), default=f.default, help=f.metadata["help"], **extra)
