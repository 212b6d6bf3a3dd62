"""A locustfile that only adds the scenario-driven load shape: ``-f locustfile.py,harness/load/shape_file.py``."""

from harness.load.shapes import KneecapShape

__all__ = ["KneecapShape"]
