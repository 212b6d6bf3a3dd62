"""kneecap in Locust's web UI: an "LLM" tab (Locust's extended tabs) and a chart page, both on the master.

No fork of Locust's UI: the tab is declared in ``template_args`` and filled through the
``extended_stats`` of ``/stats/requests``; the chart page is a Flask blueprint on Locust's own app,
behind Locust's web auth when it is on, and renders inline SVG on the server (no JavaScript, no CDN).
"""

from harness.web.ui import register

__all__ = ["register"]
