"""The errors kneecap raises on purpose, under one base class.

Catch ``KneecapError`` to handle any of them; anything else that escapes is a bug. The planned tree
(each subclass lives next to the code that raises it, not here)::

    KneecapError
    ├── ScenarioError     a scenario YAML is invalid (every problem, each with its YAML path)
    ├── StreamError       a streamed response broke the protocol (e.g. ended without [DONE])
    ├── SketchMismatch    sketches that cannot be merged or decoded (accuracy or format version differ)
    └── SinkError         a result sink (InfluxDB, files) failed
"""

from __future__ import annotations


class KneecapError(Exception):
    """Base of every error kneecap raises on purpose."""
