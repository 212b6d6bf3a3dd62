"""Where the InfluxDB token comes from: the variable ``token_env`` names, else the file its ``_FILE`` twin names."""

from __future__ import annotations

import pytest

from harness.sinks.config import InfluxConfig


def test_the_variable_then_its_file(tmp_path, monkeypatch):
    cfg = InfluxConfig(url="http://db:8086", token_env="KNEECAP_TEST_TOKEN")
    monkeypatch.delenv("KNEECAP_TEST_TOKEN", raising=False)
    monkeypatch.delenv("KNEECAP_TEST_TOKEN_FILE", raising=False)
    assert cfg.token is None
    (tmp_path / "token").write_text("write-only-token\n")
    monkeypatch.setenv("KNEECAP_TEST_TOKEN_FILE", str(tmp_path / "token"))
    assert cfg.token == "write-only-token"  # the newline a file ends with is not part of it
    monkeypatch.setenv("KNEECAP_TEST_TOKEN", "from-env")
    assert cfg.token == "from-env"  # the variable itself wins


def test_an_unreadable_token_file_is_named(tmp_path, monkeypatch):
    monkeypatch.delenv("KNEECAP_TEST_TOKEN", raising=False)
    monkeypatch.setenv("KNEECAP_TEST_TOKEN_FILE", str(tmp_path / "missing"))
    with pytest.raises(ValueError, match=r"KNEECAP_TEST_TOKEN_FILE=.*missing: cannot read the InfluxDB token"):
        InfluxConfig(url="http://db:8086", token_env="KNEECAP_TEST_TOKEN").token  # noqa: B018
