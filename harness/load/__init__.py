"""Locust glue: the LLM user, the fleet plumbing, load shapes. The only package (with web/) importing locust."""

from harness.load.plugin import Kneecap, setup
from harness.load.user import LLMUser

__all__ = ["Kneecap", "LLMUser", "setup"]
