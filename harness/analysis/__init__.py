"""Pure analysis: each step judged, the knee, SLOs; why/ (why the tail is slow), mix/ (traffic classes apart), cost/.
No Locust, no gevent, no I/O."""
