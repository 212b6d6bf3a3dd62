"""kneecap's Locust command-line options; they also work from ``locust.conf`` and the web UI's custom parameters.

Custom options reach workers with the master's spawn message, so workers read them at test start.
"""

from __future__ import annotations

from typing import Any

from harness.sinks.config import DEFAULT_BUCKET, DEFAULT_ORG, DEFAULT_TOKEN_ENV

__all__ = ["WEB_HOST", "add_arguments"]


WEB_HOST = "127.0.0.1"
"""Where kneecap's web UI listens unless told otherwise (``--web-host 0.0.0.0`` or ``LOCUST_WEB_HOST``): Locust
listens on every interface without authentication, and the UI can start and stop load and shows the results."""


def add_arguments(parser: Any) -> None:
    parser.set_defaults(web_host=WEB_HOST)
    # On the parser itself, not a group: only Locust's parser knows include_in_web_ui.
    group = parser
    group.add_argument("--scenario", default="", help="Scenario YAML file (default: the built-in chat scenario).")
    group.add_argument("--results-dir", default="", help="Where summary.json goes [scenario sinks.results_dir].")
    group.add_argument("--save-requests", default="",
                       help="Write every request record as JSON lines to this file (gathered on the master).")
    group.add_argument("--overrides", default="", include_in_web_ui=False,
                       help='Scenario overrides as a JSON object of dotted keys, e.g. \'{"workload.seed": 3}\'.')
    group.add_argument("--influx-url", default="", help="Write live results to this InfluxDB 2 [scenario sinks].")
    group.add_argument("--influx-org", default=DEFAULT_ORG, help="InfluxDB organisation.")
    group.add_argument("--influx-bucket", default=DEFAULT_BUCKET, help="InfluxDB bucket.")
    group.add_argument("--influx-token-env", default=DEFAULT_TOKEN_ENV,
                       help="Name of the environment variable holding the InfluxDB token.")
    group.add_argument("--run-id", default="", help="Run identifier [timestamp-based].", include_in_web_ui=False)
    group.add_argument("--insecure", action="store_true", default=False,
                       help="Accept any TLS certificate from the endpoint (overrides endpoint.tls.verify).")
