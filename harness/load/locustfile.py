"""The locustfile kneecap ships: the LLM user and the plumbing. ``locustfile.py`` at the repo root is this.

Add ``harness/load/shape_file.py`` (``-f locustfile.py,harness/load/shape_file.py``) for the
scenario's knee-seeking plan; ``kneecap run`` does that for you.
"""

from locust import events

from harness.load.user import LLMUser
from harness.load.wiring import setup

__all__ = ["LLMUser"]

setup(events)
