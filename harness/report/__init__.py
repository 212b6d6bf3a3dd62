"""Reports: a self-contained report.html per run, and compare.html across runs."""
