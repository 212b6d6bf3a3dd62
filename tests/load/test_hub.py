"""The hub in process, in Locust's style (its test_runners fires report_to_master and sends a Message): two
``WorkerSide``s and a ``MasterSide`` on a fake clock, every report and step message through Locust's own
``Message.serialize``, the shape's tick (``StepControl.tick``) driving a staircase, then the summary. No subprocess,
no socket.

The synthetic endpoint has 8 slots: below 8 users TTFT is ~100 ms and throughput grows with load; past 8
each extra wave of users waits a whole service time, so p99 jumps while throughput stays flat — the knee
is 8 users.
"""

from __future__ import annotations

import json
import random
from argparse import Namespace
from types import ModuleType, SimpleNamespace

import pytest

from harness.metrics.protocol import FLUSH_MESSAGE, REPORT_KEY, STEP_MESSAGE, StepMessage
from harness.metrics.record import RequestRecord

SLOTS = 8
OVERRIDES = {"load.users": {"start": 4, "step": 4, "max": 24}, "endpoint.metrics": "off",
             "load.step": {"warmup_s": 1, "min_duration_s": 4, "min_requests": 100, "max_duration_s": 30},
             "slo": {"ttft": "p(95)<1000"}}


@pytest.fixture(scope="module")
def locust() -> ModuleType:
    """Locust without gevent's monkey-patching (the rest of this pytest process keeps plain threads)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LOCUST_SKIP_MONKEY_PATCH", "1")  # read by locust/__init__.py, only on first import
        import locust.rpc.protocol
    return locust


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def _env(tmp_path, index: int | None) -> SimpleNamespace:
    options = Namespace(scenario="", overrides=json.dumps(OVERRIDES), results_dir=str(tmp_path), save_requests="",
                        run_id="hub-test", num_users=None, influx_url="")
    runner = SimpleNamespace(worker_index=index, current_cpu_usage=12.5)
    return SimpleNamespace(parsed_options=options, host="http://127.0.0.1:9", runner=runner, shape_class=object,
                           process_exit_code=None)


class Fleet:
    """Two workers and a master joined by serialized Locust messages."""

    def __init__(self, locust: ModuleType, tmp_path, failures_per_s: int = 0,
                 failure: tuple[str, str] = ("http_5xx", "")) -> None:
        from harness.load.context import ScenarioSource
        from harness.load.master import MasterSide
        from harness.load.wiring import Kneecap
        from harness.load.worker import WorkerSide

        self.Message = locust.rpc.protocol.Message
        self.out = tmp_path
        self.clock = Clock()
        self.rng = random.Random(7)
        self.failures_per_s = failures_per_s
        self.failure = failure
        self.workers = []
        for i in range(2):
            env = _env(tmp_path, i)
            source = ScenarioSource(env)
            w = WorkerSide(env, source)
            w.recorder.warmup_s = source.scenario.load.step.warmup_s  # what on_test_start sets (it also spawns)
            env.kneecap = Kneecap(source, worker=w)
            self.workers.append(w)
        self.env = _env(tmp_path, None)
        self.master = MasterSide(self.env, ScenarioSource(self.env), send_step=self._send_step, workers=lambda: 2,
                                 clock=self.clock)
        self.ticker = self.master.control
        self.sent: list[RequestRecord] = []
        self.dead: set[int] = set()
        self.lose_at: int | None = None
        """Tick at which worker 1 dies (its unreported records are lost with it)."""
        self.answer_steps = False
        """Each worker reports at once on a step message (else at the next ``report``)."""

    def _wire(self, kind: str, data: dict, node: str):
        return self.Message.unserialize(self.Message(kind, data, node).serialize())

    def _send_step(self, msg: StepMessage) -> None:
        for i, w in enumerate(self.workers):
            w.on_step(StepMessage.from_wire(self._wire(STEP_MESSAGE, msg.to_wire(), "master").data), self.clock())
            if self.answer_steps and i not in self.dead:  # as load/wiring.py's workers do: a report at once
                self.master.merge(f"worker-{i}", self._wire("report", w.report().to_wire(), f"worker-{i}").data)

    def report(self, kind: str = "stats", skip: frozenset[int] = frozenset()) -> None:
        for i, w in enumerate(self.workers):
            if i in self.dead or i in skip:
                continue
            node = f"worker-{i}"
            if kind == FLUSH_MESSAGE:
                msg = self._wire(FLUSH_MESSAGE, w.report().to_wire(), node)
                self.master.flush(msg.node_id, msg.data)
            else:
                data: dict = {}
                data[REPORT_KEY] = w.report().to_wire()  # what the report_to_master listener does
                msg = self._wire("stats", data, node)
                self.master.merge(msg.node_id, msg.data[REPORT_KEY])

    def second(self, users: int) -> None:
        """One second of the synthetic endpoint at ``users`` (split over the two workers)."""
        waves = -(-users // SLOTS)
        for _ in range(min(users, SLOTS) * 5):  # 5 requests/s per busy slot
            ttft = 0.1 * waves * self.rng.uniform(0.9, 1.1)
            rec = RequestRecord(start=0.0, ttft_s=ttft, e2e_s=ttft + 0.1, chunk_times=[ttft, ttft + 0.1],
                                output_tokens=2, prompt_tokens=100)
            self._record(rec)
        for _ in range(self.failures_per_s):
            self._record(RequestRecord(start=0.0, error=self.failure[0], error_detail=self.failure[1]))
        self.clock.t += 1.0

    def _record(self, rec: RequestRecord) -> None:
        i = len(self.sent) % 2
        if i in self.dead:
            i = 0  # the users left run on worker 0 (Locust rebalances them)
        self.workers[i].record(rec, self.clock())
        self.sent.append(rec)

    def run(self, max_ticks: int = 400, *, answered_the_end: bool = False,
            unflushed: frozenset[int] = frozenset()) -> dict:
        """``answered_the_end``: the workers report once from past the plan (what a worker does on the step message
        that ends it, ``load/wiring.py``); ``unflushed``: workers whose final report never reaches the master."""
        users = None
        for n in range(max_ticks):
            step = self.ticker.tick(self.clock())
            if step is None:
                break
            users = step.users
            if n == self.lose_at:
                self.dead.add(1)
                self.delivered_before_loss = len(self.sent)
                self.lost_unreported = self.workers[1].recorder.drain()  # never reaches the master
                self.master.control.fleet_change("lost", "worker-1")
            self.second(users)
            if n % 3 == 2:
                self.report()
        if answered_the_end:
            self.report()
        self.past_plan = not self.master.ledger.behind_the_plan()  # what the shape waits for before Locust stops
        self.report(FLUSH_MESSAGE, skip=unflushed)
        self.master.finalize()
        return json.loads((self.out / "summary.json").read_text())  # what a user gets


def test_staircase_in_process_finds_the_knee_and_counts_every_request(locust, tmp_path):
    fleet = Fleet(locust, tmp_path)
    summary = fleet.run()
    assert summary["schema"] == "kneecap.summary/3"
    knee = summary["knee"]
    assert knee["found"] and knee["confirmed"] and knee["users"] == SLOTS, knee
    assert knee["tail"] == "p99_slo" and knee["reason"].startswith("ttft p99_slo rose")
    assert summary["stop_reason"] == f"knee confirmed at {SLOTS}" and summary["workers"] == 2
    steps = summary["steps"]
    # 16 confirms the knee once its data is complete: when both workers report from the next step (20)
    assert [s["users"] for s in steps] == [4, 8, 12, 16, 20]
    assert sum(s["requests"] + s["warmup_requests"] for s in steps) == len(fleet.sent)
    for s in steps[:-1]:
        assert s["complete"] and s["stationary"] and s["generator"]["reliable"]
        ttft = s["latency_ms"]["ttft"]
        assert ttft["p99_slo"] == ttft["p99"]  # nothing failed: the two tails agree
        assert s["duration_s"] == pytest.approx(s["requests"] / (5 * min(s["users"], SLOTS)), abs=1.01)
    assert steps[0]["latency_ms"]["ttft"]["p99"] == pytest.approx(110, rel=0.02)
    assert steps[2]["latency_ms"]["ttft"]["p99"] == pytest.approx(220, rel=0.02)
    assert steps[0]["slo_passed"] and summary["slo"]["passed"] and summary["exit_code"] == 0
    assert fleet.env.process_exit_code == 0


def test_failures_make_p99_slo_differ_from_p99(locust, tmp_path):
    """2 failures per second among 20-40 successes (>1%): the successes' p99 is a latency, the SLO's is a miss."""
    fleet = Fleet(locust, tmp_path, failures_per_s=2)
    steps = fleet.run()["steps"]
    first = steps[0]
    assert first["failures"] == {"http_5xx": first["requests"] - first["ok"]} and first["ok"] < first["requests"]
    ttft = first["latency_ms"]["ttft"]
    assert ttft["p99"] == pytest.approx(110, rel=0.02) and ttft["p99_slo"] == "inf"
    assert first["slo"][0]["observed"] == "inf" and first["slo_passed"] is False


def test_a_report_from_another_version_fails_the_run(locust, tmp_path):
    fleet = Fleet(locust, tmp_path)
    fleet.master.merge("worker-9", {"v": 99, "step": 0, "buckets": []})
    summary = fleet.run()
    assert summary["merge_errors"] == 1 and summary["exit_code"] == 1 and fleet.env.process_exit_code == 1


def test_a_lost_worker_marks_its_step_which_is_re_run_and_the_run_is_degraded(locust, tmp_path):
    fleet = Fleet(locust, tmp_path)
    fleet.lose_at = 10  # in the second step (ticks 6-11), after a report at tick 8 from inside that step
    summary = fleet.run()
    (event,) = summary["fleet_events"]  # lost once: its missing final report is not a second loss
    assert event["kind"] == "lost" and event["worker"] == "worker-1" and summary["degraded"]
    steps = summary["steps"]
    hit = [s for s in steps if s["fleet_changed"]]
    assert [s["index"] for s in hit] == event["steps"] == [1] and hit[0]["workers_lost"] == ["worker-1"]
    assert steps[2]["users"] == steps[1]["users"] == 8 and not steps[2]["fleet_changed"]  # re-run at its level
    assert hit[0]["slo_passed"] is None and hit[0]["stationary"] is None  # not judged
    assert summary["knee"]["found"] and summary["knee"]["users"] == SLOTS
    lost = sum(b.requests for _, _, b in fleet.lost_unreported)
    assert lost > 0
    assert sum(s["requests"] + s["warmup_requests"] for s in steps) == len(fleet.sent) - lost
    assert summary["exit_code"] == 5 and fleet.env.process_exit_code == 5
    from harness.report.validate import as_summary
    from harness.web.ui import why_tab_rows

    view = fleet.master.view  # the "LLM why" tab says it too
    rows = why_tab_rows(view, as_summary(view.summary_json(), "live", walk=False), None)
    assert {"topic": "fleet", "text": "worker worker-1 lost: step 1 not judged, level re-run"} in rows


@pytest.mark.parametrize("answered_the_end", [True, False])
def test_a_final_report_that_never_came_is_a_loss_only_when_a_step_missed_data(locust, tmp_path, answered_the_end):
    """A headless Locust master gives the workers' final reports 0.5 s (a busy machine can miss it): a worker that
    had reported from past the plan delivered every step's data, one that had not lost the last step's."""
    fleet = Fleet(locust, tmp_path)
    summary = fleet.run(answered_the_end=answered_the_end, unflushed=frozenset({1}))
    steps = summary["steps"]
    assert fleet.past_plan == answered_the_end
    if answered_the_end:
        assert not summary["fleet_events"] and not summary["degraded"] and summary["exit_code"] == 0
        assert sum(s["requests"] + s["warmup_requests"] for s in steps) == len(fleet.sent)  # nothing was missing
        assert summary["knee"]["confirmed"] and summary["knee"]["users"] == SLOTS
    else:
        (event,) = summary["fleet_events"]
        assert event["kind"] == "lost" and event["worker"] == "worker-1" and event["steps"] == [steps[-1]["index"]]
        assert summary["degraded"] and summary["exit_code"] == 5


def test_a_plain_run_ends_its_plan_as_locust_begins_to_stop_so_a_missed_final_report_loses_nothing(locust, tmp_path):
    """A plain ``-u/-t`` run (no shape) ends its plan when Locust begins to stop (``test_stopping``) and waits for
    every worker's answer: a final report that never comes (a busy machine misses Locust's 0.5 s) loses no data,
    where before the last step lost that worker (the test above, without an answer from past the plan)."""
    from locust.event import Events

    from harness.load.locust_waits import end_the_plan_first

    fleet = Fleet(locust, tmp_path)
    fleet.answer_steps = True
    fleet.master.control.begin_plain(8)
    for n in range(6):
        fleet.second(8)
        if n % 3 == 2:
            fleet.report()
    fleet.second(8)  # a second the workers have not reported yet: their answers carry it
    events = Events()
    end_the_plan_first(SimpleNamespace(events=events), fleet.master)
    events.test_stopping.fire(environment=fleet.env)
    assert not fleet.master.ledger.behind_the_plan()
    fleet.report(FLUSH_MESSAGE, skip=frozenset({1}))
    fleet.master.finalize()
    summary = json.loads((fleet.out / "summary.json").read_text())
    assert not summary["fleet_events"] and not summary["degraded"] and summary["workers"] == 2, summary["fleet_events"]
    (step,) = summary["steps"]
    assert step["requests"] + step["warmup_requests"] == len(fleet.sent)


def test_a_step_s_rows_are_analysed_off_the_loop_which_goes_on_meanwhile(locust, tmp_path):
    """Judging a step analyses its rows (~0.3 s at 100k requests) in a native thread (``load/master.py``): the
    master's loop runs on meanwhile — reports, heartbeats, step messages — instead of waiting the whole analysis."""
    from tests.kit.loop_watch import longest_loop_wait

    fleet = Fleet(locust, tmp_path)
    fleet.answer_steps = True
    fleet.master.control.begin_plain(8)
    fleet.clock.t += 2.0  # past the warm-up
    rng = random.Random(3)
    for _ in range(30_000):
        ttft = rng.lognormvariate(-2.3, 0.5)
        times = [ttft, ttft + 0.05, ttft + 0.1]
        fleet._record(RequestRecord(start=0.0, ttft_s=ttft, e2e_s=ttft + 0.1, chunk_times=times, output_tokens=3,
                                    prompt_tokens=rng.randint(100, 4000)))
    fleet.report()
    fleet.master.control.end_plan()  # the workers answer from past it: the step is complete
    took, longest = longest_loop_wait(fleet.master.judge)
    (st,) = fleet.master.ledger.states
    assert st.judgement is not None and st.tails is not None and st.ttft_split is not None
    # inline, the loop's longest wait was the analysis itself (took: 40-70 ms for these 30k rows since the rows are
    # typed arrays, over 50 before); here the longest C call of the analysis (the GIL switches every 1 ms,
    # load/master.SWITCH_S), or the machine's own hiccups
    assert took > 0.02 and longest < took / 2, (took, longest)
    print(f"judged in {took * 1e3:.0f} ms, the loop's longest wait {longest * 1e3:.1f} ms")


def test_an_error_storm_stops_the_run_and_says_why(locust, tmp_path, caplog, monkeypatch):
    from harness.load import control

    monkeypatch.setattr(control, "PROGRESS_EVERY_S", 1.0)
    detail = "cannot connect to 127.0.0.1:9: Connection refused"
    fleet = Fleet(locust, tmp_path, failures_per_s=200, failure=("connect_error", detail))
    with caplog.at_level("INFO", logger="kneecap"):
        summary = fleet.run()
    assert summary["stop_reason"] == (f"error storm: 91% of the last step's requests failed (connect_error 91%: "
                                      f"{detail}); is the endpoint up? check --host / endpoint.host")
    assert summary["steps"][0]["failure_samples"] == {"connect_error": detail}
    progress = [r.getMessage() for r in caplog.records if r.getMessage().startswith("kneecap: step 0 |")]
    assert f"| failing: connect_error 91%: {detail}" in progress[-1]  # once the first reports are in


def test_the_web_views_read_the_master(locust, tmp_path):
    """The LLM tab's rows and the dashboard's data, from the master's read-only view (the browser test covers them
    in a real UI; this one runs in a second)."""
    from harness.web.dashboard import payload
    from harness.web.ui import llm_rows

    fleet = Fleet(locust, tmp_path)
    fleet.run()
    view = fleet.master.view
    rows = {r["metric"]: r for r in llm_rows(view)}
    assert rows["ttft (ms)"]["count"] > 0 and all(isinstance(v, (int, float)) for k, v in rows["ttft (ms)"].items()
                                                  if k != "metric")
    live = payload(view.summary_json(), view.history, list(rows.values()), "ended")
    assert live["knee"]["level"] == SLOTS and live["headline"].startswith(f"knee: {SLOTS:g} users")
    assert [p["level"] for p in live["steps"]] == sorted(p["level"] for p in live["steps"])


def test_a_run_stopped_in_a_steps_warm_up_keeps_showing_the_step_before(locust, tmp_path):
    """The knee can be confirmed just after the next step began (the shape meets time marks): the page keeps the
    last step with data, not "no requests yet"."""
    from harness.web.ui import llm_rows, status_line

    fleet = Fleet(locust, tmp_path)
    fleet.run()
    view, ledger = fleet.master.view, fleet.master.ledger
    last, shown = ledger.current, llm_rows(view)
    assert shown and view.stop_reason
    ledger.begin_step(24, fleet.clock(), 0.0, 5)  # begun as the knee was confirmed: no request measured in it
    assert ledger.current is not last and not ledger.measured(ledger.current.index).requests
    assert llm_rows(view) == shown and status_line(view).startswith(f"step {last.index}: 20 users"), status_line(view)


def test_a_clock_that_moves_during_the_run_is_warned_about_once_and_its_last_figures_kept(locust, tmp_path, caplog):
    from harness.metrics.clock import ClockOffset

    fleet = Fleet(locust, tmp_path)
    m = fleet.master
    with caplog.at_level("WARNING", logger="kneecap"):
        m.clock_measured("worker-0", ClockOffset(0.0001, 0.0002, 0.0004, 8))
        m.clock_measured("worker-1", ClockOffset(0.0002, 0.0002, 0.0004, 8))
        m.clock_measured("worker-1", ClockOffset(0.0014, 0.0002, 0.0004, 8))  # moved 1.2 ms: within the bound
        m.clock_measured("worker-1", ClockOffset(0.0102, 0.0003, 0.0006, 8))  # 10 ms: drifting, and now off
        m.clock_measured("worker-1", ClockOffset(0.0152, 0.0002, 0.0004, 8))  # still: not said again
        m.clock_measured("worker-1", ClockOffset(None, None, None, 1))  # a re-measurement lost: the last one stays
    said = [r.getMessage() for r in caplog.records if "worker-1" in r.getMessage()]
    assert len(said) == 2 and "clock +10.2 ms" in said[0] and "moved +10.0 ms" in said[1], said
    summary = fleet.run()
    assert summary["clocks"]["worker-0"] == {"offset_ms": 0.1, "bound_ms": 0.2, "rtt_ms": 0.4, "samples": 8}
    assert summary["clocks"]["worker-1"] == {"offset_ms": 15.2, "bound_ms": 0.2, "rtt_ms": 0.4, "samples": 8,
                                             "drift_ms": 15.0}
    assert [w for w in summary["clock_warnings"] if "moved" in w] == [
        "worker worker-1: clock moved +15.0 ms against the master's during the run (+0.2 -> +15.2 ms): it drifts or "
        "is being stepped; run NTP on every host; its wall times follow the latest measurement"]


def test_users_wait_for_the_step_under_way_and_without_an_answer_go_on_once_warned(locust, tmp_path, caplog,
                                                                                   monkeypatch):
    from harness.load import worker

    fleet = Fleet(locust, tmp_path)
    w = fleet.workers[0]
    monkeypatch.setattr(worker, "TOLD_TIMEOUT_S", 0.05)
    with caplog.at_level("WARNING", logger="kneecap"):
        w.wait_for_step()  # never told (an older master): waits, then says so
        w.wait_for_step()  # the next user does not wait again
    said = [r.getMessage() for r in caplog.records if "has not said which step" in r.getMessage()]
    assert len(said) == 1 and "step 0" in said[0]
    told = fleet.workers[1]
    fleet.ticker.tick(fleet.clock())  # the shape begins step 0: the master tells both workers
    assert told.told.is_set()
    told.wait_for_step()  # returns at once


def test_a_worker_reports_at_its_steps_time_marks(locust, tmp_path):
    """Each step's min duration after warm-up, then its max (``WorkerSide.step_marks``): the wiring sends a report
    then, so the master ends the step on time rather than at Locust's next 3 s report; none after the plan."""
    w = Fleet(locust, tmp_path).workers[0]
    w.on_step(StepMessage(index=0), 0.0)
    assert w.step_marks(StepMessage(index=0)) == [1 + 4, 1 + 30]
    w.on_step(StepMessage(index=1, warmup_s=2.5), 0.0)  # a step with its own warm-up (a search's drain)
    assert w.step_marks(StepMessage(index=1, warmup_s=2.5)) == [2.5 + 4, 2.5 + 30]
    assert w.step_marks(StepMessage(index=2, end=True)) == []
