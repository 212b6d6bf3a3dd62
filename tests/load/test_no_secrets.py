"""One real run, two questions about it (a fast canned target, 16 s of constant load, two workers; the API key, a
secret gateway header and an InfluxDB token set; every request saved, the report built; every kneecap process
sampling its own health every 1.5 s, ``harness/load/soak.py``):

- no secret in any file kneecap writes: every byte of every file of the run, the run store's index, what reached
  the database and the console are searched for each secret (plain, and as the base64 of ``user:secret`` a Basic
  header would carry), once each secret is shown to have been used (the target and the database received them);
- the soak's short form (``benchmarks/soak.py`` is the hour): thousands of requests on the same kept connections,
  and from the 6th second to the end no process gains a descriptor or a greenlet (the master holds the step's request
  rows, bounded by ``ROWS_CAP``). Memory is the benchmark's to judge: in 16 s a worker's RSS swings ~10% as its
  allocator takes and returns arenas (63 -> 73 -> 66 -> 73 MB in one run), more than any growth it could show.
"""

from __future__ import annotations

import base64
import json
import pathlib
import textwrap
import time
from dataclasses import dataclass

import pytest

from harness.metrics.aggregate import ROWS_CAP
from tests.kit.influx import slow_db
from tests.kit.run import RunResult, kneecap_run, write_scenario
from tests.kit.servers import CannedServer, sse_reply

pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("secrets")]  # one shared run per module
SECRETS = {"KNEECAP_TEST_API_KEY": "sk-kneecap-test-4f1c9e2a", "KNEECAP_TEST_GATEWAY": "gw-kneecap-test-7d3b0a61",
           "KNEECAP_TEST_INFLUX": "influx-kneecap-test-90e2c5f4"}
SECONDS, EVERY_S, FROM_S = 16, 1.5, 6.0


@dataclass
class Run:
    result: RunResult
    folder: pathlib.Path
    heads: bytes
    """Every request head the target received."""
    db_lines: list[str]
    db_tokens: set[str]


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    tmp = tmp_path_factory.mktemp("secrets")
    with CannedServer(sse_reply()) as target, slow_db() as db:
        db.first = -1e9  # every write answered at once
        path = write_scenario(tmp, textwrap.dedent(f"""
            name: secrets
            endpoint:
              host: "{target.url}"
              api: chat
              model: m
              metrics: "off"
              api_key_env: KNEECAP_TEST_API_KEY
              headers: {{X-Gateway-Key: {{env: KNEECAP_TEST_GATEWAY}}}}
            workload: {{input_tokens: 20, output_tokens: 3}}
            load: {{mode: constant, users: 4, duration_s: {SECONDS}, step: {{warmup_s: 0.5}}}}
            sinks:
              results_dir: "{tmp}"
              influxdb: {{url: "http://127.0.0.1:{db.server_address[1]}", token_env: KNEECAP_TEST_INFLUX,
                          org: o, bucket: b, window_s: 1}}
        """))
        env = {**SECRETS, "KNEECAP_SOAK_FILE": str(tmp / "soak.jsonl"), "KNEECAP_SOAK_EVERY_S": str(EVERY_S)}
        r = kneecap_run(path, "--save-requests", out=tmp / "out", workers=2, env=env, report=True)
        heads = b"\n".join(head for head, _ in target.received)
    assert r.code == 0, r.output
    return Run(r, tmp, heads, list(db.lines), set(db.tokens))


def _forms(secret: str) -> list[bytes]:
    return [secret.encode(), base64.b64encode(f"user:{secret}".encode()), base64.b64encode(secret.encode())]


def test_no_file_of_a_run_holds_its_key_headers_or_database_token(run: Run):
    assert f"Bearer {SECRETS['KNEECAP_TEST_API_KEY']}".encode() in run.heads  # the key and the header were sent...
    assert SECRETS["KNEECAP_TEST_GATEWAY"].encode() in run.heads
    assert run.db_tokens == {f"Token {SECRETS['KNEECAP_TEST_INFLUX']}"}, run.db_tokens  # ...and the token used
    files = [p for p in run.folder.rglob("*") if p.is_file()]  # the scenario too: it names the variables only
    names = {p.name for p in files}
    assert {"summary.json", "requests.jsonl", "report.html", "processes.json", "master.log", "index.jsonl",
            "run.json", "soak.jsonl"} <= names, names
    found = [(str(p.relative_to(run.folder)), name) for p in files for name, secret in SECRETS.items()
             for form in _forms(secret) if form in p.read_bytes()]
    found += [("the database", name) for name, secret in SECRETS.items() for form in _forms(secret)
              if form.decode() in "\n".join(run.db_lines)]
    found += [("the console", name) for name, secret in SECRETS.items() if secret in run.result.output]
    assert found == [], found


def test_a_steady_load_grows_no_descriptor_greenlet_or_memory(run: Run):
    summary = run.result.summary
    assert summary["steps"][0]["requests"] > 2000, summary["steps"][0]["requests"]
    by_process: dict[str, list[dict]] = {}
    for line in (run.folder / "soak.jsonl").read_text().splitlines():
        d = json.loads(line)
        by_process.setdefault(f"{d['role']} {d['pid']}", []).append(d)
    assert sorted(name.split()[0] for name in by_process) == ["master", "worker", "worker"], list(by_process)
    step_end = summary["started_at"] + summary["steps"][0]["warmup_s"] + summary["steps"][0]["duration_s"]
    for name, samples in by_process.items():
        start = samples[0]["t"]
        later = [s for s in samples if s["t"] - start >= FROM_S - EVERY_S and s["t"] <= step_end]  # load on
        assert len(later) >= 5, (name, len(samples))
        # a leak raises the floor; a file or connection open at the moment of one sample (the master's checkpoint,
        # a database write) does not: the last third's lowest against the first
        first, last = later[0], later[-1]
        end = later[-max(1, len(later) // 3):]
        assert min(s["fds"] for s in end) <= first["fds"], (name, [s["fds"] for s in samples])
        assert min(s["greenlets"] for s in end) <= first["greenlets"], (name, [s["greenlets"] for s in samples])
        others = [s["threads"] - s["pool_threads"] for s in later]  # gevent's pool grows to its size, by design
        assert min(others[-len(end):]) <= others[0] and others[0] >= 1, (name, others)
        if name.startswith("master"):
            assert 0 < last["rows"] <= ROWS_CAP


def test_the_soak_trace_names_the_site_that_grew():
    import tracemalloc

    from harness.load.soak import _Growth

    growth = _Growth(0.0)
    try:
        assert growth.since_base(time.time()) is None  # the base snapshot
        held = [str(i) * 8 for i in range(20_000)]  # noqa: F841 (held while the second snapshot is taken)
        top = growth.since_base(time.time())
    finally:
        tracemalloc.stop()
    kib, count, sites = top[0]
    assert kib > 500 and count >= 20_000 and any("test_no_secrets.py" in s for s in sites), top[:3]


def test_the_soak_counts_its_loops_greenlets_not_those_of_gevents_pool():
    import gc

    import gevent
    import greenlet
    from gevent.threadpool import ThreadPool

    from harness.load.soak import _loop_greenlets

    gevent.get_hub()
    before = _loop_greenlets(gc.get_objects())
    pool = ThreadPool(2)
    held = gevent.spawn(gevent.sleep, 30)
    try:
        pool.apply(lambda: None)  # a native thread, with a worker greenlet and a root of its own
        objects = gc.get_objects()
        mine, every = _loop_greenlets(objects), sum(isinstance(o, greenlet.greenlet) for o in objects)
        assert pool.size == 1 and mine == before + 1 and every >= mine + 2, (before, mine, every)
    finally:
        held.kill()
        pool.kill()


def test_the_soak_samples_the_allocators_accounts():
    from harness.load.soak import _malloc, _pymalloc

    heap, py = _malloc(), _pymalloc()
    assert set(heap) == {"heap_mb", "heap_used_mb", "heap_free_mb", "malloc_mmap_mb"}  # glibc here (Debian)
    assert 0 < heap["heap_used_mb"] <= heap["heap_mb"] and heap["heap_free_mb"] >= 0
    assert set(py) == {"py_arenas_mb", "py_used_mb", "py_free_mb", "py_unused_pools_mb"}
    assert 0 < py["py_used_mb"] < py["py_arenas_mb"]
    held = [str(i) * 8 for i in range(50_000)]  # ~3.5 MB of small objects: pymalloc's
    assert _pymalloc()["py_used_mb"] > py["py_used_mb"] + 2, len(held)
