"""The docker compose stack, checked without a Docker engine (there is none on these machines).

``docker-compose config`` (Debian's docker-compose 1.29, which ``.ci/run`` installs) resolves the file as compose
would; every kneecap and locust command then goes through the real click and Locust parsers, and every Grafana
query is checked against ``harness/sinks/schema.py``.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import click
import pytest
import yaml

from harness.cli import main as kneecap_cli
from harness.scenario import load_scenario
from harness.sinks.schema import COMMON_TAGS, MEASUREMENTS

ROOT = Path(__file__).resolve().parent.parent
COMPOSE = ROOT / "docker-compose.yml"
ENV_EXAMPLE = ROOT / ".env.example"
GRAFANA = ROOT / "deploy" / "grafana"
DASHBOARD = GRAFANA / "dashboards" / "kneecap.json"
SERVICES = {"influxdb", "grafana", "sim", "master", "worker"}
KNEECAP_SERVICES = ("sim", "master", "worker")
SECRET_KEY = re.compile(r"PASSWORD|TOKEN|SECRET|API_KEY")


@pytest.fixture(scope="module")
def config() -> dict:
    """The compose file as ``docker-compose config`` resolves it with the committed .env.example."""
    exe = shutil.which("docker-compose")
    if exe is None:
        pytest.fail("docker-compose is not installed; install it with `apt-get install -y docker-compose` "
                    "(.ci/run does): it validates docker-compose.yml without a Docker engine")
    # A clean environment: the shell's variables would override .env.example's.
    env = {"PATH": os.environ.get("PATH", ""), "HOME": os.environ.get("HOME", "/tmp")}
    proc = subprocess.run([exe, "-f", COMPOSE.name, "--env-file", ENV_EXAMPLE.name, "config"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"docker-compose config failed:\n{proc.stderr}"
    return yaml.safe_load(proc.stdout)


def _host_ip_and_port(port: str | dict) -> tuple[str, str]:
    """(host ip, published port) of a ports entry, short ("127.0.0.1:80:80/tcp") or long syntax."""
    if isinstance(port, dict):
        return str(port.get("host_ip", "")), str(port.get("published", ""))
    parts = str(port).split("/")[0].split(":")
    return (parts[0] if len(parts) == 3 else ""), (parts[-2] if len(parts) >= 2 else "")


@pytest.mark.integration
def test_config_resolves_to_five_services_on_loopback(config: dict) -> None:
    services = config["services"]
    assert set(services) == SERVICES
    published = {}
    for name, service in services.items():
        for port in service.get("ports", []):
            ip, host_port = _host_ip_and_port(port)
            assert ip == "127.0.0.1", f"{name} publishes {port!r} beyond loopback"
            published[host_port] = name
    assert published == {"8086": "influxdb", "3000": "grafana", "8000": "sim", "8089": "master"}
    # `docker compose up --scale worker=N` needs both absent.
    assert "ports" not in services["worker"] and "container_name" not in services["worker"]
    assert services["influxdb"]["image"] == "influxdb:2.7"
    assert services["grafana"]["image"].startswith("grafana/grafana:11.")
    for name in KNEECAP_SERVICES:
        assert Path(services[name]["build"]["context"]) == ROOT, f"{name} is not built from the repo's Dockerfile"
    assert services["influxdb"]["environment"]["DOCKER_INFLUXDB_INIT_MODE"] == "setup"


def _command(service: dict) -> list[str]:
    command = service["command"]
    return shlex.split(command) if isinstance(command, str) else [str(a) for a in command]


def _kneecap(args: list[str]) -> click.Context:
    """Parse ``kneecap ARGS`` with the real click command, without running it."""
    commands = kneecap_cli.commands
    assert args and args[0] in commands, f"kneecap has no subcommand {args[:1]}; it has {sorted(commands)}"
    try:
        return commands[args[0]].make_context(f"kneecap {args[0]}", args[1:])
    except click.ClickException as exc:
        pytest.fail(f"kneecap {shlex.join(args)}: {exc.format_message()}")


def _locust(args: list[str]):
    """Parse ``locust ARGS`` with Locust's own parser plus kneecap's options, without starting anything."""
    from locust.argument_parser import get_empty_argument_parser, setup_parser_arguments

    from harness.load.options import add_arguments

    parser = get_empty_argument_parser(add_help=False, default_config_files=[])
    parser.prog = "locust"
    setup_parser_arguments(parser)
    add_arguments(parser)  # what kneecap's init_command_line_parser listener adds
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            options = parser.parse_args(args)
    except SystemExit:
        pytest.fail(f"locust {shlex.join(args)}: {err.getvalue().strip()}")
    for locustfile in options.locustfile.split(","):
        assert (ROOT / locustfile).is_file(), f"-f names {locustfile}, which is not in the repo"
    return options


def _dockerfile_copies() -> set[str]:
    sources = set()
    for line in (ROOT / "Dockerfile").read_text().splitlines():
        if line.startswith("COPY "):
            sources.update(p.rstrip("/") for p in line.split()[1:-1])
    return sources


@pytest.mark.integration
@pytest.mark.parametrize("name", KNEECAP_SERVICES)
def test_command_is_a_valid_invocation(config: dict, name: str) -> None:
    services = config["services"]
    args = _command(services[name])
    program, args = args[0], args[1:]
    assert program in ("kneecap", "locust"), f"{name} runs {program}; the image has kneecap and locust"
    copied = _dockerfile_copies()
    if program == "kneecap":
        ctx = _kneecap(args)
        assert ctx.params["host"] == "0.0.0.0", "the simulator must listen beyond the container's loopback"
        assert _host_ip_and_port(services[name]["ports"][0])[1] == str(ctx.params["port"])
        return
    options = _locust(args)
    for locustfile in options.locustfile.split(","):
        assert locustfile.split("/")[0] in copied, f"the Dockerfile does not COPY {locustfile}"
    if options.worker:
        assert "--master" in _command(services.get(options.master_host, {"command": []})), "--master-host is no master"
        return
    assert options.master and options.web_port == 8089
    assert options.host == "http://sim:8000", ".env.example's target is the stack's simulator"
    assert options.scenario.split("/")[0] in copied, f"the Dockerfile does not COPY {options.scenario}"
    # The scenario must validate with the master's overrides (the InfluxDB sink's settings).
    scenario = load_scenario(str(ROOT / options.scenario), json.loads(options.overrides))
    influx = scenario.influxdb
    assert influx, "the master does not configure the InfluxDB sink (sinks.influxdb)"
    assert influx["url_env"] in services[name]["environment"]
    assert f"{influx['token_env']}_FILE" in services[name]["environment"], "the master's token comes from a file"
    assert services[name]["environment"][influx["url_env"]] == "http://influxdb:8086"
    assert (influx["org"], influx["bucket"]) == tuple(
        services["influxdb"]["environment"][f"DOCKER_INFLUXDB_INIT_{k}"] for k in ("ORG", "BUCKET"))


# -- the Grafana dashboard -----------------------------------------------------------------------------------------

COLUMN_REF = re.compile(r'\br(?:\.(\w+)|\["(\w+)"\])(?:\s*(?:==|!=)\s*"([^"]*)")?')
RUN_FILTER = re.compile(r'\br(?:\.run|\["run"\])\s*==\s*"\$(?:\{run\}|run)"')
FLUX_COLUMNS = {"_measurement", "_field", "_value", "_time"}


def _dashboard_queries(dashboard: dict) -> list[tuple[str, str]]:
    """(where, Flux query) of every panel target, annotation and variable."""
    out = [(f"panel {p['title']!r}", t["query"]) for p in dashboard["panels"] for t in p["targets"]]
    out += [(f"annotation {a['name']!r}", a["target"]["query"]) for a in dashboard["annotations"]["list"]
            if not a.get("builtIn")]
    out += [(f"variable {v['name']!r}", v["query"]) for v in dashboard["templating"]["list"]]
    return out


def _references(query: str) -> tuple[set[str], set[tuple[str, str | None]]]:
    """The measurements a query reads and every (column, compared value) it uses."""
    refs = {(a or b, value) for a, b, value in COLUMN_REF.findall(query)}
    return {v for c, v in refs if c == "_measurement"}, refs


def test_dashboard_queries_use_only_the_schema() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    used = set()
    for where, query in _dashboard_queries(dashboard):
        measurements, refs = _references(query)
        assert measurements, f"{where}: no r._measurement filter"
        unknown = measurements - MEASUREMENTS.keys()
        assert not unknown, f"{where}: unknown measurement {unknown}; schema.py has {sorted(MEASUREMENTS)}"
        fields = {f for m in measurements for f in MEASUREMENTS[m]["fields"]}
        tags = set(COMMON_TAGS) | {t for m in measurements for t in MEASUREMENTS[m]["tags"]}
        for column, value in refs:
            assert column in tags | fields | FLUX_COLUMNS, f"{where}: r.{column} is no tag or field of {measurements}"
            if column == "_field":
                assert value in fields, f"{where}: field {value!r} is not in {measurements}'s {sorted(fields)}"
                used |= {(m, value) for m in measurements if value in MEASUREMENTS[m]["fields"]}
        assert query.count("from(bucket: v.defaultBucket)") == (0 if where.startswith("variable") else 1), where
    required = {("kneecap_latency", f) for f in ("p50", "p95", "p99")} | {
        ("kneecap_step", "p99"), ("kneecap_step", "load"), ("kneecap_throughput", "output_tokens_per_s"),
        ("kneecap_throughput", "requests_per_s"), ("kneecap_throughput", "goodput_per_s"), ("kneecap_errors", "count"),
        ("kneecap_server", "waiting"), ("kneecap_server", "running"), ("kneecap_server", "kv_cache_usage"),
        ("kneecap_generator", "lag_p99_ms"), ("kneecap_event", "text")}
    assert not required - used, f"no panel shows {sorted(required - used)}"
    metrics = {v for _, q in _dashboard_queries(dashboard) for c, v in _references(q)[1] if c == "metric"}
    assert {"ttft", "tpot", "e2e"} <= metrics


def test_dashboard_filters_every_panel_by_run() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    (variable,) = [v for v in dashboard["templating"]["list"] if v["name"] == "run"]
    assert variable["type"] == "query" and 'tag: "run"' in variable["query"]
    for where, query in _dashboard_queries(dashboard):
        if not where.startswith("variable"):
            assert RUN_FILTER.search(query), f'{where} does not filter on r.run == "${{run}}"'
    (annotation,) = [a for a in dashboard["annotations"]["list"] if not a.get("builtIn")]
    assert '"kneecap_event"' in annotation["target"]["query"] and annotation["enable"]


@pytest.mark.integration
def test_grafana_provisioning_matches_the_dashboard(config: dict) -> None:
    (datasource,) = yaml.safe_load((GRAFANA / "provisioning" / "datasources" / "influxdb.yaml").read_text())[
        "datasources"]
    assert datasource["type"] == "influxdb" and datasource["jsonData"]["version"] == "Flux"
    assert datasource["url"] == "http://influxdb:8086"
    # Grafana expands $VARS from its own environment, which compose fills from .env; its token is a file's.
    grafana_env = config["services"]["grafana"]["environment"]
    for value in (datasource["jsonData"]["organization"], datasource["jsonData"]["defaultBucket"]):
        assert value.startswith("$") and value.strip("${}") in grafana_env, value
    assert re.fullmatch(r"\$__file\{/[\w/.-]+\}", datasource["secureJsonData"]["token"])
    dashboard = json.loads(DASHBOARD.read_text())
    uids = {p["datasource"]["uid"] for p in dashboard["panels"]} | {v["datasource"]["uid"]
                                                                    for v in dashboard["templating"]["list"]}
    assert uids == {datasource["uid"]}
    (provider,) = yaml.safe_load((GRAFANA / "provisioning" / "dashboards" / "kneecap.yaml").read_text())["providers"]
    mounts = {v.split(":")[1]: v.split(":")[0] for v in config["services"]["grafana"]["volumes"] if ":" in v}
    assert Path(mounts[provider["options"]["path"]]) == DASHBOARD.parent


# -- .env.example --------------------------------------------------------------------------------------------------

def _env_example() -> dict[str, str]:
    pairs = (line.split("=", 1) for line in ENV_EXAMPLE.read_text().splitlines()
             if line.strip() and not line.lstrip().startswith("#"))
    return {key.strip(): value.strip() for key, value in pairs}


def test_env_example_defines_every_compose_variable() -> None:
    used = {a or b for a, b in re.findall(r"\$(?:\{(\w+)[^}]*\}|(\w+))", COMPOSE.read_text())}
    env = _env_example()
    assert used - env.keys() == set(), "docker-compose.yml uses variables .env.example does not define"
    assert env.keys() - used == set(), ".env.example defines variables docker-compose.yml never uses"


def test_no_secret_is_committed() -> None:
    for key, value in _env_example().items():
        if SECRET_KEY.search(key):
            assert value == "" or value.startswith("change-me"), f".env.example {key} looks like a real secret"
    raw = yaml.safe_load(COMPOSE.read_text())
    for name, service in raw["services"].items():
        for key, value in (service.get("environment") or {}).items():
            if SECRET_KEY.search(key) and key.endswith("_FILE"):  # a path to a secret, not one
                assert str(value).startswith("/"), f"{name} {key}: a secret's file is an absolute path in a volume"
            elif SECRET_KEY.search(key):
                assert re.fullmatch(r"\$\{\w+\}", str(value)), f"{name} {key}: take secrets from .env, as ${{VAR}}"


@pytest.mark.integration
def test_web_ui_is_loopback_only(config: dict) -> None:
    """kneecap's UI listens on 127.0.0.1 unless told; compose opens it in the master's container only, and the
    host publishes it on its loopback (the UI starts and stops load and has no login)."""
    assert _locust(["-f", "locustfile.py"]).web_host == "127.0.0.1"
    assert _locust(["-f", "locustfile.py", "--web-host", "0.0.0.0"]).web_host == "0.0.0.0"
    master = config["services"]["master"]
    opts = _locust(_command(master)[1:])
    assert opts.web_host == "0.0.0.0" and opts.web_insecure  # said on purpose: kneecap refuses it otherwise
    assert all(str(p).startswith("127.0.0.1:") for s in config["services"].values() for p in s.get("ports", ()))


# -- InfluxDB's tokens: write-only for the master, read-only for Grafana, the admin's in InfluxDB alone ---------------

TOKENS_SCRIPT = ROOT / "deploy" / "influxdb" / "init" / "kneecap-tokens.sh"


def _mounts(service: dict) -> dict[str, tuple[str, str]]:
    """{target: (source, mode)} of a resolved service's volumes (short syntax, as docker-compose config writes)."""
    out = {}
    for v in service.get("volumes", []):
        source, target, *mode = str(v).split(":")
        out[target] = (source, mode[0] if mode else "rw")
    return out


def _auth_creates() -> list[str]:
    """Each ``influx auth create`` of the script, its continuation lines joined."""
    text = TOKENS_SCRIPT.read_text().replace("\\\n", " ")
    return [line for line in text.splitlines() if "$(influx auth create" in line]


@pytest.mark.integration
def test_the_master_writes_and_grafana_reads_with_their_own_tokens(config: dict) -> None:
    """As far as there is no Docker engine here: the wiring, and the script's permissions. The script itself runs
    only in the influxdb image (its influx CLI), which this machine cannot start."""
    services = config["services"]
    influxdb, master, grafana = services["influxdb"], services["master"], services["grafana"]
    assert "DOCKER_INFLUXDB_INIT_ADMIN_TOKEN" not in influxdb["environment"]  # generated, kept in influxdb-config
    assert not [k for s in services.values() for k in (s.get("environment") or {})
                if SECRET_KEY.search(k) and "TOKEN" in k and not k.endswith("_FILE")], "a token from .env"
    mounted = _mounts(influxdb)
    assert mounted["/docker-entrypoint-initdb.d"][0] == str(TOKENS_SCRIPT.parent)
    assert mounted["/etc/influxdb2"][0] == "influxdb-config"
    readers = {"master": (master, master["environment"]["INFLUX_TOKEN_FILE"], "kneecap-master", "--write-bucket"),
               "grafana": (grafana, yaml.safe_load((GRAFANA / "provisioning" / "datasources" / "influxdb.yaml")
                                                   .read_text())["datasources"][0]["secureJsonData"]["token"]
                           .removeprefix("$__file{").removesuffix("}"), "kneecap-grafana", "--read-bucket")}
    creates = _auth_creates()
    assert len(creates) == 2, creates
    for name, (service, path, folder, permission) in readers.items():
        volume, mode = _mounts(service)[os.path.dirname(path)]
        assert mode == "ro", f"{name} mounts its token read-only"
        assert mounted[f"/etc/influxdb2/{folder}"][0] == volume, f"influxdb writes {name}'s token into its volume"
        users = [n for n, s in services.items() if volume in {src for src, _ in _mounts(s).values()}]
        assert sorted(users) == sorted(["influxdb", name]), f"{volume} is mounted by {users}"
        (create,) = [c for c in creates if permission in c]
        assert f"/etc/influxdb2/{folder}/token" in TOKENS_SCRIPT.read_text()
        flags = set(re.findall(r"--[\w-]+", create))
        assert flags == {"--org-id", permission, "--description", "--json"}, flags  # that one permission only
    assert os.access(TOKENS_SCRIPT, os.X_OK), "run-parts runs executable scripts only"
    check = subprocess.run(["bash", "-n", str(TOKENS_SCRIPT)], capture_output=True, text=True, timeout=30)
    assert check.returncode == 0, check.stderr
