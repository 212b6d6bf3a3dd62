"""kneecap in Locust's web UI, on the master: the "LLM" and "LLM why" tabs and a live dashboard at ``/kneecap/``.

No fork of Locust's UI: the tabs are declared in ``template_args`` (Locust's extended tabs and tables) and
filled through the ``extended_stats`` of ``/stats/requests``: "LLM" is the running step's percentile table,
"LLM why" the knee, the search and the why as topic/text rows. The dashboard (``page.py``) is one HTML page with
inline SVG and script, no library and no CDN, that polls ``/kneecap/live.json`` (``dashboard.py``); all of it is
a Flask blueprint on Locust's own app, behind Locust's web auth when it is on.
"""

from harness.web.ui import register

__all__ = ["register"]
