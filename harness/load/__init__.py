"""Locust glue: the LLM user, the fleet plumbing, load shapes. The only package (with web/) importing locust."""

from harness.load.user import LLMUser
from harness.load.wiring import setup

__all__ = ["LLMUser", "setup"]
