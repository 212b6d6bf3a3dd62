"""A mix of traffic classes (and the probes) measured apart: each class's figures, SLO, tail and cost. Pure."""
