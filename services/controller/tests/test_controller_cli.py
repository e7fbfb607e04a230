"""`tf-controller` / `python -m gpuplane_controller` flags: Go-style single-dash flags mirror the
documented ones, override the environment, and a bad value exits 2 naming the flag."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from gpuplane_controller.cli import parser, settings_from_args


def test_flags_map_to_settings() -> None:
    s = settings_from_args(
        [
            "-cluster-host-port-range",
            "43000-43100",
            "-enable-auto-expander",
            "-port",
            "18080",
            "-grpc-port=19090",
            "-config",
            "/etc/tf/config.yaml",
            "-leader-elect=false",
        ]
    )
    assert s.enable_auto_expander is True
    assert s.http_port == 18080 and s.grpc_port == 19090
    assert s.dynamic_config_path == "/etc/tf/config.yaml"
    assert s.leader_elect is False
    assert s.cluster_host_port_range == "43000-43100"


def test_defaults_without_flags() -> None:
    s = settings_from_args([])
    assert s.enable_auto_expander is False
    assert s.cluster_host_port_range == "42000-62000"
    assert s.http_port == 8080


def test_flags_override_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUPLANE_CONTROLLER_HTTP_PORT", "7000")
    monkeypatch.setenv("GPUPLANE_CONTROLLER_ENABLE_AUTO_EXPANDER", "true")
    assert settings_from_args([]).http_port == 7000
    s = settings_from_args(["-port", "7001", "-enable-auto-expander=false"])
    assert s.http_port == 7001 and s.enable_auto_expander is False


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["-port", "abc"], "-port"),
        (["-port", "70000"], "-port"),
        (["-cluster-host-port-range", "62000-42000"], "-cluster-host-port-range"),
        (["-enable-auto-expander=perhaps"], "-enable-auto-expander"),
        (["-no-such-flag"], "-no-such-flag"),
    ],
)
def test_invalid_flag_exits_2_naming_it(
    args: list[str], flag: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as e:
        settings_from_args(args)
    assert e.value.code == 2
    assert flag in capsys.readouterr().err


def test_console_script_rejects_bad_flag_with_exit_2() -> None:
    exe = os.path.join(os.path.dirname(sys.executable), "tf-controller")
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUPLANE_CONTROLLER_")}
    r = subprocess.run(
        [exe, "-cluster-host-port-range", "5-1"], capture_output=True, text=True, env=env, timeout=120
    )
    assert r.returncode == 2, r.stderr
    assert "-cluster-host-port-range" in r.stderr and "Traceback" not in r.stderr


def test_help_lists_documented_flags() -> None:
    text = parser().format_help()
    for flag in (
        "-cluster-host-port-range",
        "-enable-auto-expander",
        "-port",
        "-grpc-port",
        "-config",
        "-leader-elect",
    ):
        assert flag in text
