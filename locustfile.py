"""kneecap's locustfile: ``locust -f locustfile.py --scenario scenarios/chat.yaml`` (web UI) or headless.

Thin on purpose: everything lives in harness/load (this re-exports the packaged locustfile).
Add the knee-seeking plan with ``-f locustfile.py,harness/load/shape_file.py``.
"""

from harness.load.locustfile import LLMUser

__all__ = ["LLMUser"]
