"""Every exit code kneecap gives, in one place (as k6's ``errext/exitcodes/codes.go``). Pure: imports nothing.

Once a run has started, ``kneecap run`` returns the code its ``summary.json`` records (``exit_code``;
NO_VALID_RESULT when there is none), and a plain ``locust`` master running kneecap exits with it too
(``environment.process_exit_code``, which Locust's ``main.py`` checks before its own). The numbers keep
Locust's 1 (errors) and click's 2 (usage), so a wrapper that knows either tool reads them right; 3 to 7
are ours. The README's "Exit codes" table explains each.
"""

__all__ = ["DEGRADED", "ERROR", "MASTER_LOST", "NO_VALID_RESULT", "OK", "REGRESSED", "SLO_FAILED", "USAGE"]

OK = 0
"""The run finished with a valid result and every SLO held (or there were none)."""

ERROR = 1
"""An error: a result sink failed, a worker report could not be merged, or a command could not do its job."""

USAGE = 2
"""A usage error (bad flag, click's code), an invalid scenario or input file (trace, log, summary); nothing was run."""

SLO_FAILED = 3
"""A valid result in which an SLO failed at a counted step up to the knee (every counted step without a knee)."""

NO_VALID_RESULT = 4
"""No valid result: no summary was written, no step with successes counted (``analysis/counted.py``: its generator
was unreliable, it was cut short), or over 1% of the requests overflowed the model's context (``summary.json``
``invalid``: the server did not run the workload's prompts)."""

DEGRADED = 5
"""Otherwise OK, but the fleet lost a worker during the run: the steps it hit were re-run or not judged
(``summary.json`` ``degraded``/``fleet_events``); a failed SLO or no valid result takes precedence."""

REGRESSED = 6
"""``kneecap compare --gate``: NEW regressed from BASE on at least one gated metric (past its threshold, beyond
both runs' noise; docs/gate.md). Not a run's code: ``kneecap run`` never returns it."""

MASTER_LOST = 7
"""The master ended mid-run without its summary (killed, crashed, out of memory). ``kneecap run`` writes the steps
judged until its last checkpoint (``summary.json`` ``incomplete``); a worker whose master is gone stops its load and
exits with it (``load/master_watch.py``)."""
