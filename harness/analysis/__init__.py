"""Pure analysis: step judging, the knee, SLOs. No Locust, no gevent, no I/O."""
