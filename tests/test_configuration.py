"""Settings: environment parsing, and the configuration reference lists every setting."""

from __future__ import annotations

from pathlib import Path

import pytest

from sessionlog_server.config import SETTING_NAMES, Settings, unknown_variables
from sessionlog_server.tokens import TokenStore
from sessionlog_server.transport.credentials import server_credentials

ROOT = Path(__file__).resolve().parents[1]


def test_every_setting_is_documented() -> None:
    reference = (ROOT / "deploy" / "CONFIGURATION.md").read_text()
    for name in SETTING_NAMES:
        assert f"`SESSIONLOG_{name.upper()}`" in reference, f"SESSIONLOG_{name.upper()} is not documented"


def test_environment_then_flags() -> None:
    env = {"SESSIONLOG_LEASE_TTL_MS": "1_500", "SESSIONLOG_MIGRATE": "off", "SESSIONLOG_DB": "sqlite:///x.db"}
    settings = Settings.from_env(env, db="sqlite:///y.db", listen=None)
    assert settings.lease_ttl_ms == 1500 and settings.migrate is False
    assert settings.db == "sqlite:///y.db" and settings.listen == "127.0.0.1:50051"


def test_bad_values_name_the_variable() -> None:
    with pytest.raises(ValueError, match="SESSIONLOG_LEASE_TTL_MS"):
        Settings.from_env({"SESSIONLOG_LEASE_TTL_MS": "soon"})
    with pytest.raises(ValueError, match="SESSIONLOG_MIGRATE"):
        Settings.from_env({"SESSIONLOG_MIGRATE": "perhaps"})
    for name in ("SESSIONLOG_COMMIT_BACKLOG_BYTES", "SESSIONLOG_GROUP_COMMIT_MAX_BATCHES"):
        for value in ("0", "-1"):
            with pytest.raises(ValueError, match=f"{name}={value} must be at least 1"):
                Settings.from_env({name: value})
        assert Settings.from_env({name: "1"}) is not None


def test_numbers_out_of_their_range_are_refused() -> None:
    # A negative lease TTL started a service that granted a second writer a lease while the
    # first still held one; `--workers -1` started no worker at all and waited.
    for name in ("SESSIONLOG_LEASE_TTL_MS", "SESSIONLOG_MAX_BATCH_EVENTS", "SESSIONLOG_SNAPSHOT_EVERY_EVENTS"):
        for value in ("0", "-5"):
            with pytest.raises(ValueError, match=f"{name}={value} must be at least 1"):
                Settings.from_env({name: value})
    for name in ("SESSIONLOG_WORKERS", "SESSIONLOG_MAX_EVENTS_PER_SECOND", "SESSIONLOG_SHUTDOWN_GRACE_S"):
        with pytest.raises(ValueError, match=f"{name}=-1(\\.0)? must be at least 0"):
            Settings.from_env({name: "-1"})
        assert Settings.from_env({name: "0"}) is not None  # 0: off, or one worker per core
    with pytest.raises(ValueError, match="SESSIONLOG_WORKERS=-1"):
        Settings.from_env({}, workers=-1)  # as `serve --workers -1` passes it


def test_numbers_past_what_they_can_mean_are_refused() -> None:
    # A ping interval or message size past a C int was gRPC's OverflowError traceback at
    # start-up (a restart loop under --workers); a lease TTL of 10^23 ms started and then
    # failed every write; a grace of `inf` crashed the stop.
    for name, value in [
        ("SESSIONLOG_CLIENT_PING_MS", "99999999999"),
        ("SESSIONLOG_MAX_MESSAGE_BYTES", "99999999999"),
        ("SESSIONLOG_LEASE_TTL_MS", "99999999999999999999999"),
    ]:
        with pytest.raises(ValueError, match=f"{name}={value} must be at most {2**31 - 1}"):
            Settings.from_env({name: value})
    for value in ("inf", "Infinity"):
        with pytest.raises(ValueError, match="SESSIONLOG_SHUTDOWN_GRACE_S=inf must be at most"):
            Settings.from_env({"SESSIONLOG_SHUTDOWN_GRACE_S": value})
    assert Settings.from_env({"SESSIONLOG_CLIENT_PING_MS": str(2**31 - 1)}).client_ping_ms == 2**31 - 1
    # `--workers 1000` started a thousand server processes, each with its caches and pool.
    with pytest.raises(ValueError, match="SESSIONLOG_WORKERS=1000 must be at most 64"):
        Settings.from_env({}, workers=1000)
    assert Settings.from_env({}, workers=64).workers == 64
    big = Settings.from_env({"SESSIONLOG_SESSION_CACHE_BYTES": str(64 * 2**30)})  # a memory bound: 64 GiB
    assert big.session_cache_bytes == 64 * 2**30


def test_a_timeout_that_is_not_a_number_is_refused() -> None:
    # `nan` parsed as a float and passed every range check: each writer stream then failed at
    # once (WRITER_OPEN_TIMEOUT under asyncio, a ValueError under uvloop).
    for name in ("SESSIONLOG_WRITER_OPEN_TIMEOUT_S", "SESSIONLOG_SHUTDOWN_GRACE_S"):
        for value in ("nan", "NaN", "-nan"):
            with pytest.raises(ValueError, match=f"{name}=nan is not a number"):
                Settings.from_env({name: value})


def test_a_bad_sqlite_mode_or_log_level_names_its_variable() -> None:
    # Both were refused only by the code that used them, without the variable's name, and the
    # SQLite mode only after the migrations had run on the database.
    with pytest.raises(ValueError, match="SESSIONLOG_SQLITE_SYNCHRONOUS='bogus' is not one of"):
        Settings.from_env({"SESSIONLOG_SQLITE_SYNCHRONOUS": "bogus"})
    with pytest.raises(ValueError, match="SESSIONLOG_LOG_LEVEL='loud' is not one of"):
        Settings.from_env({"SESSIONLOG_LOG_LEVEL": "loud"})
    settings = Settings.from_env({"SESSIONLOG_SQLITE_SYNCHRONOUS": "normal", "SESSIONLOG_LOG_LEVEL": "WARNING"})
    assert settings.sqlite_synchronous == "normal" and settings.log_level == "WARNING"


def test_an_otlp_endpoint_that_is_not_an_http_url_names_its_variable() -> None:
    # `notaurl` was accepted: the service started, and every export failed later, in a thread.
    for value in ("notaurl", "collector:4318", "ftp://collector/v1/traces", "http://", "http://collector:99999/"):
        with pytest.raises(ValueError, match=f"SESSIONLOG_OTLP_ENDPOINT='{value}' is not an http"):
            Settings.from_env({"SESSIONLOG_OTLP_ENDPOINT": value})
    for value in ("http://collector:4318/v1/traces", "HTTPS://otel.example.com/v1/traces", ""):
        assert Settings.from_env({"SESSIONLOG_OTLP_ENDPOINT": value}).otlp_endpoint == value


def test_a_file_a_setting_names_that_cannot_be_read_names_the_setting(tmp_path: Path) -> None:
    # `serve` said only "PATH: No such file or directory", not which setting named the file.
    missing = str(tmp_path / "nope")
    with pytest.raises(OSError) as tokens:  # `serve` prints its strerror, one line
        TokenStore.load(missing, None)
    assert tokens.value.strerror == f"SESSIONLOG_TOKENS_FILE: {missing}: No such file or directory"
    with pytest.raises(OSError) as key:
        server_credentials(Settings(tls_cert_file=missing, tls_key_file=missing))
    assert key.value.strerror == f"SESSIONLOG_TLS_KEY_FILE: {missing}: No such file or directory"


def test_a_sessionlog_variable_nothing_reads_is_named_with_the_setting_it_is_closest_to() -> None:
    # `SESSIONLOG_LISTNE=0.0.0.0:9000` was ignored without a word: the service served on its
    # default address. `serve` now logs each such variable as it starts.
    environ = {
        "SESSIONLOG_LISTNE": "0.0.0.0:9000",
        "SESSIONLOG_LISTEN": "127.0.0.1:50051",  # a setting
        "SESSIONLOG_SERVER": "127.0.0.1:50051",  # the CLI's
        "SESSIONLOG_TEST_PG": "postgresql://x",  # the test suite's
        "SESSIONLOG_FROBNICATE": "1",
        "PATH": "/usr/bin",
    }
    assert unknown_variables(environ) == [("SESSIONLOG_FROBNICATE", None), ("SESSIONLOG_LISTNE", "SESSIONLOG_LISTEN")]
