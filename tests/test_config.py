"""zsnli.config: ZSNLI_* environment parsing, validation, path resolution."""

from __future__ import annotations

import pytest

from zsnli.config import Settings, SettingsError


def test_defaults():
    s = Settings.from_env({})
    assert s.model_dir == "./model" and s.token_budget is None and s.max_labels == 256
    assert s.queue_capacity_pairs >= 2 * s.max_labels
    assert not s.skip_manifest_check and s.device is None and s.dtype is None
    assert any(line.startswith("ZSNLI_TOKEN_BUDGET=") for line in s.describe())


def test_from_env_parses_types():
    s = Settings.from_env({
        "ZSNLI_MODEL_DIR": "/m", "ZSNLI_TOKEN_BUDGET": "4096", "ZSNLI_MAX_BATCH_WAIT_MS": "2.5",
        "ZSNLI_SKIP_MANIFEST_CHECK": "true", "ZSNLI_DEVICE": "cuda:1", "ZSNLI_DTYPE": "bf16",
        "ZSNLI_TORCH_THREADS": "4", "ZSNLI_EXIT_ON_STARTUP_ERROR": "0", "UNRELATED": "x",
    })
    assert (s.model_dir, s.token_budget, s.max_batch_wait_ms) == ("/m", 4096, 2.5)
    assert s.skip_manifest_check is True and s.exit_on_startup_error is False
    assert (s.device, s.dtype, s.torch_threads) == ("cuda:1", "bf16", 4)
    assert Settings.from_env({"ZSNLI_TOKEN_BUDGET": "100"}, token_budget=200).token_budget == 200
    assert Settings.from_env({"ZSNLI_TOKEN_BUDGET": ""}).token_budget is None


@pytest.mark.parametrize(
    "env",
    [
        {"ZSNLI_TOKEN_BUDGET": "lots"},
        {"ZSNLI_TOKEN_BUDGET": "0"},
        {"ZSNLI_MAX_LABELS": "0"},
        {"ZSNLI_SKIP_MANIFEST_CHECK": "maybe"},
        {"ZSNLI_REQUEST_TIMEOUT_S": "nan"},
        {"ZSNLI_MAX_BATCH_WAIT_MS": "-1"},
        {"ZSNLI_MAX_PADDING": "1.5"},
        {"ZSNLI_MAX_PADDING": "half"},
        {"ZSNLI_MAX_LABELS": "256", "ZSNLI_QUEUE_CAPACITY_PAIRS": "100"},
    ],
)
def test_bad_values_raise_one_line(env):
    with pytest.raises(SettingsError) as info:
        Settings.from_env(env)
    assert "\n" not in str(info.value) and "ZSNLI_" in str(info.value)


def test_manifest_and_calibration_paths(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    s = Settings(model_dir=str(model))
    assert s.resolved_manifest_path() == tmp_path / "training_manifest.json"
    assert s.resolved_calibration_path() == tmp_path / "calibration.json"
    (model / "calibration.json").write_text("{}")
    assert s.resolved_calibration_path() == model / "calibration.json"
    explicit = Settings(model_dir=str(model), manifest_path="/x/m.json")
    assert str(explicit.resolved_manifest_path()) == "/x/m.json"


@pytest.mark.parametrize("env, says", [
    ({"ZSNLI_TORCH_THREADS": "2.5"}, "ZSNLI_TORCH_THREADS must be an integer, got '2.5'"),
    ({"ZSNLI_MAX_LENGTH": "1e3"}, "ZSNLI_MAX_LENGTH must be an integer, got '1e3'"),
    ({"ZSNLI_TOKEN_BUDGET": "lots"}, "ZSNLI_TOKEN_BUDGET must be an integer"),
    ({"ZSNLI_MAX_LABELS": "5.0"}, "ZSNLI_MAX_LABELS must be an integer"),
    ({"ZSNLI_REQUEST_TIMEOUT_S": "soon"}, "ZSNLI_REQUEST_TIMEOUT_S must be a number"),
])
def test_a_non_integer_for_an_integer_setting_says_integer(env, says):
    with pytest.raises(SettingsError) as info:
        Settings.from_env(env)
    assert says in str(info.value)


def test_bakeoff_integer_settings_say_integer():
    from zsnli.compare.service.settings import BakeoffSettings

    with pytest.raises(SettingsError, match="ZSNLI_BAKEOFF_MAX_LABELS must be an integer"):
        BakeoffSettings.from_env({"ZSNLI_BAKEOFF_MAX_LABELS": "2.5"})


def test_unknown_settings_warn_with_the_closest_name():
    from zsnli.config import unknown_settings

    lines = unknown_settings({"ZSNLI_BACKEN": "onnx-int8", "ZSNLI_FOO": "1", "ZSNLI_BACKEND": "torch",
                              "ZSNLI_BENCH_DOCS": "4", "ZSNLI_PORT": "1", "PATH": "/bin"})
    assert lines == ["unknown setting ZSNLI_BACKEN ignored (did you mean ZSNLI_BACKEND?)",
                     "unknown setting ZSNLI_FOO ignored"]


@pytest.mark.parametrize("raw, level", [("warn", "warning"), ("WARNING", "warning"), (" Info ", "info"),
                                        ("trace", "trace"), ("DEBUG", "debug")])
def test_log_level_is_read_case_insensitively_with_warn_as_warning(raw, level):
    assert Settings.from_env({"ZSNLI_LOG_LEVEL": raw}).log_level == level


@pytest.mark.parametrize("raw", ["verbose", "5", "warnings", ""])
def test_bad_log_level_is_one_line_naming_the_setting(raw):
    with pytest.raises(SettingsError) as err:
        Settings.from_env({"ZSNLI_LOG_LEVEL": raw})
    assert str(err.value).startswith("ZSNLI_LOG_LEVEL must be one of critical, error, warning, info, debug, trace")


@pytest.mark.parametrize("raw, host", [("[::1]", "::1"), ("::1", "::1"), ("127.0.0.1", "127.0.0.1"), (None, "0.0.0.0"),
                                       ("localhost", "localhost"), ("api.example.com.", "api.example.com."),
                                       ("fe80::1%lo", "fe80::1%lo")])
def test_host_forms_accepted(raw, host):
    from zsnli.config import listen_address

    assert listen_address({} if raw is None else {"HOST": raw})[0] == host


@pytest.mark.parametrize("raw, says", [("localhost:8000", "the port goes in PORT"), ("[localhost]", "HOST must be"),
                                       ("[127.0.0.1]", "HOST must be"), ("exa mple", "HOST must be"),
                                       ("http://localhost", "HOST must be"), ("-bad-.example", "HOST must be")])
def test_bad_host_is_one_line_naming_host(raw, says):
    from zsnli.config import listen_address

    with pytest.raises(SettingsError) as err:
        listen_address({"HOST": raw})
    assert says in str(err.value) and str(err.value).startswith("HOST ") and "\n" not in str(err.value)


def test_check_listen_names_port_in_use_and_unresolvable_host(monkeypatch):
    import socket

    from zsnli.config import check_listen

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(SettingsError, match=rf"^PORT {port} is already in use on HOST 127\.0\.0\.1"):
            check_listen("127.0.0.1", port)
    check_listen("127.0.0.1", port)  # free again: no error, nothing left bound
    with pytest.raises(SettingsError, match=r"^HOST 10\.255\.255\.1 cannot be listened on"):
        check_listen("10.255.255.1", port)  # not an address of this machine

    def no_such_host(*_a, **_k):
        raise socket.gaierror(-2, "Name or service not known")

    monkeypatch.setattr(socket, "getaddrinfo", no_such_host)
    with pytest.raises(SettingsError, match=r"^HOST 'nowhere' does not resolve"):
        check_listen("nowhere", port)


def test_check_listen_binds_the_bracketed_ipv6_loopback():
    import socket

    from zsnli.config import check_listen, listen_address

    if not socket.has_ipv6:
        pytest.skip("no IPv6 on this machine")
    host, _ = listen_address({"HOST": "[::1]"})
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
    except OSError:
        pytest.skip("the IPv6 loopback is not configured here")
    check_listen(host, 0)


@pytest.mark.parametrize("device, says", [("gpu", "ZSNLI_DEVICE must be cpu, cuda or cuda:N"),
                                          ("cuda", "ZSNLI_DEVICE=cuda but CUDA is not available"),
                                          ("cuda:3", "ZSNLI_DEVICE=cuda:3 but"), ("tpu", "ZSNLI_DEVICE must be")])
def test_device_torch_cannot_use_is_refused(device, says):
    import torch

    from zsnli.serving.startup import check_device

    if device.startswith("cuda") and torch.cuda.is_available() and torch.cuda.device_count() > 3:
        pytest.skip("this machine has the GPUs")
    with pytest.raises(SettingsError) as err:
        check_device(device)
    assert str(err.value).startswith(says) and "\n" not in str(err.value)
    check_device("cpu")
    check_device(None)
