"""The test kit: one fixture or helper per real part, shared by the test modules (``tests/kit/*.py``)."""
