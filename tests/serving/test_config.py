"""ServerConfig: YAML loading, unknown keys refused, messages naming the field."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from tether.errors import ConfigError
from tether.serving.config import BatcherConfig, ServerConfig


def test_yaml_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "serve.yaml"
    path.write_text(
        "port: 0\nmetrics_port: null\nbatcher:\n  max_batch_size: 8\n  execution: thread\n"
        "admission:\n  rate_limit_hz: 50\n"
    )
    cfg = ServerConfig.from_yaml(path)
    assert cfg.port == 0
    assert cfg.metrics_port is None
    assert cfg.batcher.max_batch_size == 8
    assert cfg.batcher.execution == "thread"
    assert cfg.admission.rate_limit_hz == 50


def test_unknown_key_fails_naming_file_and_field(tmp_path: Path) -> None:
    path = tmp_path / "serve.yaml"
    path.write_text("batcher:\n  max_batch: 8\n")
    with pytest.raises(ConfigError, match=r"(?s)serve\.yaml is invalid.*max_batch"):
        ServerConfig.from_yaml(path)


def test_missing_file_and_bad_yaml(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read server config"):
        ServerConfig.from_yaml(tmp_path / "absent.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("port: [1,\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        ServerConfig.from_yaml(bad)


def test_range_messages_name_the_value() -> None:
    with pytest.raises(ValidationError, match="max_batch_size must be between 1 and 4096, got 0"):
        BatcherConfig(max_batch_size=0)
    with pytest.raises(ValidationError, match="port must be between 0 and 65535, got 70000"):
        ServerConfig(port=70000)


def test_every_field_is_documented() -> None:
    for model in (
        ServerConfig,
        *(
            f.annotation
            for f in ServerConfig.model_fields.values()
            if isinstance(f.annotation, type) and issubclass(f.annotation, ServerConfig.__mro__[1])
        ),
    ):
        for name, field in model.model_fields.items():
            assert field.description, f"{model.__name__}.{name} has no description"


def test_mismatched_tls_pair_is_a_setup_error(tmp_path: Path) -> None:
    from tether.serving.config import SecurityConfig
    from tether.serving.errors import ServerSetupError
    from tether.serving.security import server_credentials

    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert.write_text("-----BEGIN CERTIFICATE-----\nnot a certificate\n-----END CERTIFICATE-----\n")
    key.write_text("-----BEGIN PRIVATE KEY-----\nnot a key\n-----END PRIVATE KEY-----\n")
    with pytest.raises(ServerSetupError, match=r"cert\.pem and key .*not a valid PEM pair"):
        server_credentials(SecurityConfig(tls_cert_file=cert, tls_key_file=key))
    with pytest.raises(ServerSetupError, match="tls_key_file is not set"):
        server_credentials(SecurityConfig(tls_cert_file=cert))
