"""Start-up imports stay lean: heavy libraries load where they are used, not in every process.

Measured with ``python -X importtime`` (2026-12-01): matplotlib (~0.3 s, numpy with it) came with the web UI's charts
and influxdb_client (~0.2 s) with the master's sinks, into every worker; a worker's start-up CPU was 0.88 s, 0.34 s
without them. The report (matplotlib) is built after the load stopped; InfluxDB only with a sink configured.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

HEAVY = ("matplotlib", "numpy", "influxdb_client", "harness.web", "harness.report.charts")
_CHECK = "import sys; {imports}; print(' '.join(m for m in {heavy!r} if m in sys.modules))"


@pytest.mark.integration
@pytest.mark.parametrize("role, imports", [
    ("worker", "import locust, harness.load.locustfile"),
    ("master", "import locust, harness.load.locustfile, harness.load.shape_file, harness.load.master"),
    ("kneecap run", "import harness.cli, harness.run"),
])
def test_no_heavy_import_at_start_up(role, imports):
    done = subprocess.run([sys.executable, "-c", _CHECK.format(imports=imports, heavy=HEAVY)], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [], f"{role} imports {done.stdout.strip()} at start-up"
