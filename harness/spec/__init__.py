"""What a scenario says, as typed values: the config types its consumers share, parsed and checked. Pure.

``load.py`` (the ``load:`` plan and its steps), ``slo.py`` (k6-style thresholds), ``gate.py`` (the regression gate's
thresholds), ``cost.py`` (prices), ``timeouts.py`` (a request's limits), ``adapters.py`` (LoRA adapters). They live
here, below ``scenario.py`` and every package that reads them, so that no two top-level units import each other.
"""
