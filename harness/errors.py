"""The errors kneecap raises on purpose, under one base class.

Catch ``KneecapError`` to handle any of them; anything else that escapes is a bug. Each subclass lives
next to the code that raises it, not here (``tests/test_errors.py`` checks this tree against the code)::

    KneecapError
    ├── ScenarioError        scenario.py: a scenario that cannot run (every problem, each with its key path)
        └── SweepError       capacity/sweep_spec.py: a sweep file that cannot run (every problem, each cell's too)
    ├── StreamProtocolError  client/stream.py: a response broke its API's protocol (``kind``: its error class)
    ├── OversizedLine        client/sse.py: a line longer than the SSE decoder's limit (a broken or hostile server)
    ├── SketchMismatch       metrics/sketch.py: sketches that cannot be merged or decoded (accuracy or version differ)
    ├── ProtocolError        metrics/protocol.py: a worker's payload the master cannot read (another version, garbage)
    └── StreamFailure        load/user_report.py: a failed request as Locust's failure table shows it (a row per class)

Outside the tree: ``TraceError`` (workload/traces.py, a log that cannot be read as asked) is a ``ValueError``;
``ApiError`` (sim/openai.py) never leaves the simulator, which answers it as an HTTP error. There is no sink
error: the InfluxDB sink spools what it cannot write, and a sink that raises while closing fails the run with
``exitcodes.ERROR``.
"""

from __future__ import annotations


class KneecapError(Exception):
    """Base of every error kneecap raises on purpose."""
