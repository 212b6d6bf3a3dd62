"""Workloads: length distributions, production logs, prompts. Pure: no Locust, no gevent."""
