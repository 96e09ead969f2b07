import os
import stat

import pytest

from studio.backend.servers.launchers import (
    LaunchError,
    embedded_launch,
    find_vllm,
    parse_extra_args,
    vllm_omni_launch,
)
from studio.config import StudioSettings


@pytest.fixture
def fake_vllm(tmp_path):
    """An executable file named vllm: the launcher only needs it to exist; it is never run here."""
    venv_bin = tmp_path / "venv" / "bin"
    venv_bin.mkdir(parents=True)
    exe = venv_bin / "vllm"
    exe.write_text("#!/bin/sh\nexit 0\n")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return exe


def settings(**values):
    return StudioSettings(_env_file=None, **values)


def test_cosmos3_nano_tp4_argv_and_env(fake_vllm):
    spec = vllm_omni_launch(
        settings(
            engine="vllm-omni",
            model="nvidia/Cosmos3-Nano",
            vllm_executable=str(fake_vllm),
            tensor_parallel_size=4,
            gpus="0,1,2,3",
            model_class_name="Cosmos3OmniDiffusersPipeline",
            api_key="sk-secret",
        ),
        port=8123,
    )
    assert spec.argv[:4] == [str(fake_vllm), "serve", "nvidia/Cosmos3-Nano", "--omni"]
    argv = spec.argv
    assert argv[argv.index("--host") + 1] == "127.0.0.1"
    assert argv[argv.index("--port") + 1] == "8123"
    assert argv[argv.index("--tensor-parallel-size") + 1] == "4"
    assert argv[argv.index("--init-timeout") + 1] == "1800"
    assert argv[argv.index("--model-class-name") + 1] == "Cosmos3OmniDiffusersPipeline"
    assert "--log-stats" in argv and "--no-guardrails" not in argv
    assert spec.env["CUDA_VISIBLE_DEVICES"] == "0,1,2,3"
    assert spec.env["VLLM_API_KEY"] == "sk-secret"
    assert "sk-secret" not in " ".join(argv) and "sk-secret" not in spec.display()
    assert "--api-key" not in argv


def test_guardrails_off_and_extra_args(fake_vllm):
    spec = vllm_omni_launch(
        settings(
            engine="vllm-omni",
            model="m",
            vllm_executable=str(fake_vllm.parent.parent),
            guardrails=False,
            extra_serve_args="--enforce-eager --cache-backend 'tea_cache'",
        ),
        port=9000,
    )
    assert spec.argv[0] == str(fake_vllm)  # a venv directory is accepted
    assert "--no-guardrails" in spec.argv
    assert spec.argv[-3:] == ["--enforce-eager", "--cache-backend", "tea_cache"]
    assert "VLLM_API_KEY" not in spec.env


def test_tensor_parallel_that_does_not_fit_is_refused(fake_vllm):
    with pytest.raises(LaunchError, match="needs 8 GPUs, but --gpus 0,1,2,3 give 4"):
        vllm_omni_launch(
            settings(
                engine="vllm-omni",
                vllm_executable=str(fake_vllm),
                tensor_parallel_size=4,
                cfg_parallel_size=2,
                gpus="0,1,2,3",
            ),
            port=9000,
        )
    with pytest.raises(LaunchError, match="GPU indices"):
        vllm_omni_launch(settings(engine="vllm-omni", vllm_executable=str(fake_vllm), gpus="0;rm -rf /"), port=1)


def test_missing_vllm_says_how_to_install(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(LaunchError, match="pip install vllm vllm-omni"):
        find_vllm("vllm")


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ("--allowed-local-media-path /", "set --allowed-local-media-path, which widens"),
        ("--host=0.0.0.0", "set --host, which widens"),
        ("--enforce-eager\n--host 0.0.0.0", "one line"),
        ("--x 'unterminated", "cannot parse"),
    ],
)
def test_extra_args_refuse_risky_or_broken_input(extra, message):
    with pytest.raises(LaunchError, match=message):
        parse_extra_args(extra)


def test_shell_metacharacters_stay_literal_arguments():
    assert parse_extra_args("--served-model-name 'a;b' $(x)") == ["--served-model-name", "a;b", "$(x)"]


def test_docker_variant_publishes_on_loopback_only(fake_vllm, tmp_path):
    spec = vllm_omni_launch(
        settings(
            engine="vllm-omni",
            model="nvidia/Cosmos3-Nano",
            use_docker=True,
            gpus="2,3",
            tensor_parallel_size=2,
            hf_home=tmp_path,
            api_key="k",
            docker_image="img:tag",
        ),
        port=8500,
    )
    argv = spec.argv
    assert argv[:5] == ["docker", "run", "--rm", "--gpus", '"device=2,3"']
    assert "127.0.0.1:8500:8000" in argv and "--ipc=host" in argv
    assert f"{tmp_path}:/root/.cache/huggingface" in argv
    assert argv[argv.index("img:tag") + 1 :][:4] == ["vllm", "serve", "nvidia/Cosmos3-Nano", "--omni"]
    assert "VLLM_API_KEY" in argv and "k" not in argv  # the name only; docker copies the value from env


def test_embedded_launch_passes_key_in_env_only():
    spec = embedded_launch(settings(api_key="topsecret", guardrails=False, engine_threads=1), port=7001)
    assert spec.argv[1:3] == ["-m", "studio.engine"]
    assert "--no-guardrails" in spec.argv and "topsecret" not in spec.argv
    assert spec.env["VLLM_API_KEY"] == "topsecret"
    assert os.path.basename(spec.argv[0]).startswith("python")


def test_risky_extra_args_pass_only_when_confirmed(caplog):
    assert parse_extra_args("--host 0.0.0.0 --enforce-eager", allow_risky=True) == [
        "--host",
        "0.0.0.0",
        "--enforce-eager",
    ]
    assert "extra serve args set --host (confirmed by the user)" in caplog.text
    with pytest.raises(LaunchError, match="--allow-risky-serve-args"):
        parse_extra_args("--allowed-local-media-path=/")


@pytest.mark.parametrize(
    ("extra", "flag"),
    [
        ("--hos 0.0.0.0", "--host"),  # argparse takes a unique prefix
        ("--ho=0.0.0.0", "--host"),
        ("--h 0.0.0.0", "--host"),  # ambiguous (--help too): refused rather than guessed
        ("--allowed_local_media_path /", "--allowed-local-media-path"),  # vLLM reads _ as -
        ("--allowed-local-media /", "--allowed-local-media-path"),
        ("--allowed_local_media=/", "--allowed-local-media-path"),
        ("--allowed-local-media-path.x /", "--allowed-local-media-path"),  # vLLM's --a.b: a key of --a
        ("--enforce-eager --config serve.yaml", "--config"),  # a file that may set any of them
        ("--conf=serve.yaml", "--config"),
    ],
)
def test_every_spelling_of_a_risky_flag_is_refused(extra, flag):
    with pytest.raises(LaunchError, match=f"set {flag}\\b.*which widens"):
        parse_extra_args(extra)


def test_ordinary_flags_still_pass():
    extra = "--enforce-eager --max_model_len=4096 --served-model-name hoster --config-format auto --port 9 -- --x"
    assert parse_extra_args(extra) == extra.split()
