"""kneecap's locustfile: ``locust -f locustfile.py --scenario scenarios/chat.yaml`` (web UI) or headless.

Thin on purpose: the user class and the plumbing live in harness/load.
"""

from locust import events

from harness.load import LLMUser, setup

__all__ = ["LLMUser"]

setup(events)
