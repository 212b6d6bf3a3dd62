"""Metrics: mergeable percentile sketches and their wire format. Pure Python; no locust, gevent or numpy.

``Sketch`` is a DDSketch-style quantile sketch (±1% by default) that workers fill and the master
merges exactly; ``encode_sketch``/``decode_sketch`` turn it into a versioned msgpack-friendly dict.
"""

from harness.metrics.sketch import Sketch, SketchMismatch
from harness.metrics.wire import decode_sketch, encode_sketch

__all__ = ["Sketch", "SketchMismatch", "decode_sketch", "encode_sketch"]
