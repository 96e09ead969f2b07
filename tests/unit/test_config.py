import pytest

from studio.config import StudioSettings, load_settings


def test_env_prefix_and_flag_override(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".env").write_text("OMNI_STUDIO_PORT=7000\nOMNI_STUDIO_DEFAULT_TIER=720p\n")
    monkeypatch.setenv("OMNI_STUDIO_PORT", "7100")
    monkeypatch.setenv("OMNI_STUDIO_REMOTE_URLS", "http://a:8000, http://b:8000/v1")
    settings = load_settings(port=None, tensor_parallel_size=4)
    assert settings.port == 7100  # env beats .env
    assert settings.default_tier == "720p"  # .env beats the default
    assert settings.tensor_parallel_size == 4
    assert settings.remote_urls == ["http://a:8000", "http://b:8000/v1"]
    assert load_settings(port=7200).port == 7200  # flags beat env


def test_api_key_is_secret():
    settings = StudioSettings(_env_file=None, api_key="sk-123")
    assert "sk-123" not in repr(settings) and settings.api_key_value() == "sk-123"


def _ui_settings(*argv: str) -> StudioSettings:
    from studio.cli import build_parser
    from studio.cli.studio_flags import studio_settings

    return studio_settings(build_parser().parse_args(["ui", *argv]))


def test_flags_are_built_from_the_settings_and_keep_their_names(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    settings = _ui_settings(
        "--engine", "vllm-omni", "--tp", "4", "--url", "http://a:8000", "--url", "http://b:8000/v1",
        "--serve-args", "--max-num-seqs 2", "--vllm", "/opt/vllm", "--docker", "--no-server-guardrails",
        "--init-timeout", "90", "--out", "runs", "--port", "7001", "--share", "--auth", "u:p",
    )  # fmt: skip
    assert settings.engine == "vllm-omni" and settings.tensor_parallel_size == 4
    assert settings.remote_urls == ["http://a:8000", "http://b:8000/v1"]
    assert settings.extra_serve_args == "--max-num-seqs 2" and settings.vllm_executable == "/opt/vllm"
    assert settings.use_docker and not settings.guardrails and settings.init_timeout_s == 90
    assert str(settings.outputs_dir) == "runs" and settings.port == 7001 and settings.share
    assert [account.get_secret_value() for account in settings.auth] == ["u:p"]
    assert _ui_settings("--tensor-parallel-size", "2").tensor_parallel_size == 2


def test_cli_flags_beat_env_which_beats_dotenv(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".env").write_text("OMNI_STUDIO_PORT=7000\nOMNI_STUDIO_ENGINE=remote\n")
    monkeypatch.setenv("OMNI_STUDIO_PORT", "7100")
    settings = _ui_settings()
    assert (settings.port, settings.engine) == (7100, "remote")
    assert _ui_settings("--port", "7200", "--engine", "embedded").port == 7200
    assert _ui_settings("--engine", "embedded").engine == "embedded"


def test_engine_settings_flags_beat_env(monkeypatch):
    from studio.engine.__main__ import build_parser, engine_settings

    monkeypatch.setenv("OMNI_STUDIO_ENGINE_MAX_BATCH", "4")
    monkeypatch.setenv("VLLM_API_KEY", "sk-env")
    assert engine_settings(build_parser().parse_args([])).max_batch == 4
    settings = engine_settings(build_parser().parse_args(["--max-batch", "2", "--compile", "off"]))
    assert settings.max_batch == 2 and settings.compile == "off"
    assert settings.api_key is not None and settings.api_key.get_secret_value() == "sk-env"


def test_a_flag_without_a_description_is_refused():
    import argparse

    from pydantic import BaseModel

    from studio.settings_flags import add_model_flags

    class Undocumented(BaseModel):
        level: int = 1

    with pytest.raises(ValueError, match="level has no description"):
        add_model_flags(argparse.ArgumentParser(), Undocumented)


def test_a_scaling_fleet_starts_at_its_minimum_within_its_bounds(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    settings = _ui_settings(
        "--cluster", "ray", "--replicas-min", "1", "--replicas-max", "3", "--scale-out-queue", "2.5",
        "--scale-out-after", "5", "--scale-in-idle", "40",
    )  # fmt: skip
    assert (settings.replicas_min, settings.replicas_max, settings.replicas) == (1, 3, 1) and settings.scales
    assert (settings.scale_out_queue, settings.scale_out_after_s, settings.scale_in_idle_s) == (2.5, 5.0, 40.0)
    assert _ui_settings("--replicas-min", "1", "--replicas-max", "3", "--replicas", "2").replicas == 2
    assert not _ui_settings("--replicas", "2").scales
    monkeypatch.setenv("OMNI_STUDIO_REPLICAS_MIN", "2")
    monkeypatch.setenv("OMNI_STUDIO_REPLICAS_MAX", "4")
    monkeypatch.setenv("OMNI_STUDIO_SCALE_IN_IDLE_S", "90")
    from_env = _ui_settings()
    assert (from_env.replicas, from_env.replicas_max, from_env.scale_in_idle_s) == (2, 4, 90.0)
    assert _ui_settings("--replicas-max", "2").replicas_max == 2  # the flag beats the env


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"replicas_min": 2}, "--replicas-min and --replicas-max go together"),
        ({"replicas_max": 2}, "--replicas-min and --replicas-max go together"),
        ({"replicas_min": 3, "replicas_max": 2}, "--replicas-min 3 is more than --replicas-max 2"),
        ({"replicas_min": 1, "replicas_max": 2, "replicas": 3}, "--replicas 3 .* is outside --replicas-min 1"),
        ({"replicas_min": 0, "replicas_max": 2}, "greater than or equal to 1"),
        ({"replicas_min": 1, "replicas_max": 2, "engine": "remote"}, "scale a fleet the studio runs"),
        ({"scale_out_queue": 0}, "greater than 0"),
    ],
)
def test_scaling_settings_that_cannot_work_are_refused_with_what_to_change(values, message):
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match=message):
        StudioSettings(_env_file=None, **values)


def test_the_ui_command_says_what_is_wrong_with_the_scaling_flags(capsys):
    from studio.cli import main

    assert main(["ui", "--replicas-min", "3", "--replicas-max", "2"]) == 2
    assert "--replicas-min 3 is more than --replicas-max 2" in capsys.readouterr().err
