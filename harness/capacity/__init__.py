"""Capacity practice: many runs as one question (sweeps, the run store, the regression gate, exports)."""
