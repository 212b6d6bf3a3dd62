"""Metrics: mergeable percentile sketches and their wire format. Pure: no locust or gevent (numpy only for a
master's batch of pending bins, ``sketch.fold_bins``, imported when one comes).

``Sketch`` is a DDSketch-style quantile sketch (±1% by default) that workers fill and the master
merges exactly; ``encode_sketch``/``decode_sketch`` turn it into versioned bytes for the wire
(``metrics/wire.py``).
"""

from harness.metrics.sketch import Sketch, SketchMismatch
from harness.metrics.wire import decode_sketch, encode_sketch

__all__ = ["Sketch", "SketchMismatch", "decode_sketch", "encode_sketch"]
