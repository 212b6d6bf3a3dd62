"""Why a step is slow: the tail's attribution to request features, server-wide pauses, long prefills ahead, where
TTFT went. Pure."""
