"""The lane's one vLLM (``--max-num-seqs 8``), shared by its tests; ``.ci/engine`` sets the venv up first."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.kit.vllm import VllmServer, start_vllm


@pytest.fixture(scope="session")
def vllm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VllmServer]:
    with start_vllm(8, log_dir=str(tmp_path_factory.mktemp("vllm"))) as server:
        yield server
