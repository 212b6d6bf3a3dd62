"""The test kit: one fixture or helper per real part, shared by the test modules (``tests/kit/*.py``).

- ``run``: ``kneecap run`` as the tests start it (``write_scenario``, ``kneecap_run`` -> ``RunResult``,
  ``start_kneecap_run``); ``scenarios``: the chat scenario and staircase more than one module runs.
- ``sim``: a simulator process (``start_sim``); ``sim_http``: talking to it over HTTP; ``procs``: a free port, a
  process's output line by line (``Lines``); ``fleet``: a Locust fleet started by hand.
- ``servers``: canned HTTP(S) servers in a thread; ``sse_events``: typed SSE events read strictly; ``wire``: a
  chat stream as scripted bytes and the reader fed them; ``summaries``: summary.json as the master writes it;
  ``bad_chunks``: chunks a server should not send, the case tables several client tests read.
- ``influx``: a scenario writing to InfluxDB, a write endpoint slow on cue (``slow_db``), the summary a run left.
- ``lanes``: the lanes of ``pytest -n`` (tests marked ``timing`` run alone).

Test modules import helpers and shared case tables from here, not from each other or from ``conftest``
(``tests/test_layers.py`` checks): test_fast_path reads the cases of test_reader and test_openai_chunks, both
ways, from ``bad_chunks``.
"""
