"""Locust glue: the LLM user, the fleet plumbing, load shapes. The only package (with web/) importing locust.

Import the modules themselves (``harness.load.user``, ``harness.load.wiring``): this package runs nothing on
import, so a module that needs one piece of it never drags in the rest.
"""
