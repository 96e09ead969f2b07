"""What a Hugging Face Space reads from the repository, and what the studio makes of a Space's environment.

The Hub reads README.md's front matter and installs pre-requirements.txt and requirements.txt; those two are made
from pyproject.toml (scripts/requirements_from_pyproject.py) and must agree with it. studio/hosting.py turns a
Space's variables and hardware into settings.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import sys
import tomllib
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

from studio.config import StudioSettings
from studio.hosting import (
    CPU_SPACE_LIMITS,
    GPU_SPACE_LIMITS,
    SPACE_STORAGE_SUBDIR,
    Hardware,
    SpaceEnvironment,
    hosted_settings,
)

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def load_script():
    """scripts/ is no package: load the script as a module of its own name."""
    name = "requirements_from_pyproject"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # dataclasses look their module up there
        spec.loader.exec_module(module)
    return sys.modules[name]


def front_matter() -> dict:
    text = (ROOT / "README.md").read_text()
    assert text.startswith("---\n"), "README.md must open with the Space's front matter"
    block, sep, _ = text[4:].partition("\n---\n")
    assert sep, "the front matter is not closed by ---"
    return yaml.safe_load(block)


def pinned(name: str) -> str:
    """The version pyproject.toml pins `name` to (==)."""
    [requirement] = [
        Requirement(line) for line in PYPROJECT["project"]["dependencies"] if Requirement(line).name == name
    ]
    [specifier] = list(requirement.specifier)
    assert specifier.operator == "==", f"pyproject.toml must pin {name} with =="
    return specifier.version


# --- the front matter ---------------------------------------------------------------------------------------------


def test_the_front_matter_makes_a_gradio_space_with_hugging_face_sign_in():
    meta = front_matter()
    assert meta["sdk"] == "gradio"
    assert meta["hf_oauth"] is True
    assert (ROOT / meta["app_file"]).is_file()
    assert meta["app_file"] == "studio/app.py"
    assert isinstance(meta["title"], str) and meta["title"]
    assert isinstance(meta["pinned"], bool)


def test_the_space_runs_the_gradio_and_python_the_project_pins_and_is_tested_on():
    meta = front_matter()
    # Quoted in YAML: unquoted, 3.10 would read as the number 3.1.
    assert isinstance(meta["sdk_version"], str) and isinstance(meta["python_version"], str)
    assert meta["sdk_version"] == pinned("gradio")
    assert importlib.metadata.version("gradio") == meta["sdk_version"]
    assert SpecifierSet(PYPROJECT["project"]["requires-python"]).contains(meta["python_version"] + ".0")
    assert meta["python_version"].count(".") == 1


# --- requirements.txt and pre-requirements.txt --------------------------------------------------------------------


def test_the_requirement_files_are_the_ones_made_from_pyproject():
    script = load_script()
    pre = (ROOT / "pre-requirements.txt").read_text()
    wanted = script.render((ROOT / "pyproject.toml").read_text(), script.build_in_file(pre))
    assert pre == wanted.pre_requirements, "run python scripts/requirements_from_pyproject.py"
    assert (ROOT / "requirements.txt").read_text() == wanted.requirements, "run scripts/requirements_from_pyproject.py"
    assert script.main(["--check"]) == 0


def requirement_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line and not line.startswith("#")]


def test_requirements_hold_every_dependency_and_torch_comes_first_from_the_cpu_index():
    requirements = requirement_lines((ROOT / "requirements.txt").read_text())
    assert requirements == PYPROJECT["project"]["dependencies"]
    assert "gradio[oauth]==" + pinned("gradio") in requirements  # sign-in on a Space needs the oauth extra
    pre = requirement_lines((ROOT / "pre-requirements.txt").read_text())
    torch = next(line for line in requirements if Requirement(line).name == "torch")
    assert pre == ["--extra-index-url https://download.pytorch.org/whl/cpu", torch]


def test_a_gpu_build_changes_only_the_index_of_torch():
    script = load_script()
    pyproject = (ROOT / "pyproject.toml").read_text()
    cpu = script.render(pyproject, "cpu")
    cuda = script.render(pyproject, "cu128")
    assert "--extra-index-url https://download.pytorch.org/whl/cu128" in cuda.pre_requirements
    assert cuda.requirements == cpu.requirements
    assert "--extra-index-url" not in script.render(pyproject, "pypi").pre_requirements
    assert script.build_in_file(cuda.pre_requirements) == "cu128"
    assert script.build_in_file(script.render(pyproject, "pypi").pre_requirements) == "pypi"
    with pytest.raises(ValueError, match="cuNNN"):
        script.render(pyproject, "rocm-ish")


# --- a Space's environment read into settings ---------------------------------------------------------------------

CPU_SPACE = Hardware(gpus=0, cpus=2)
GPU_SPACE = Hardware(gpus=1, cpus=4)


def space(storage: Path, **values: object) -> SpaceEnvironment:
    return SpaceEnvironment(space_id="omni/studio", space_host="omni-studio.hf.space", storage=storage, **values)


def settings(**values: object) -> StudioSettings:
    return StudioSettings(_env_file=None, **values)


def test_off_a_space_the_settings_are_left_as_they_are(tmp_path):
    given = settings(port=9000)
    hosted = hosted_settings(given, SpaceEnvironment(space_id=None, storage=tmp_path), CPU_SPACE)
    assert hosted.settings is given and not hosted.on_space and hosted.notes == ()


def test_on_a_space_it_binds_what_the_space_says_and_keeps_outputs_in_persistent_storage(tmp_path):
    environment = space(tmp_path, server_name="0.0.0.0", server_port=7861)
    hosted = hosted_settings(settings(), environment, CPU_SPACE)
    assert (hosted.settings.host, hosted.settings.port) == ("0.0.0.0", 7861)
    assert hosted.persistent
    assert hosted.settings.outputs_dir == tmp_path / SPACE_STORAGE_SUBDIR
    assert (tmp_path / SPACE_STORAGE_SUBDIR).is_dir()
    assert any("https://omni-studio.hf.space" in note for note in hosted.notes)
    # Without the Space's variables: Gradio's defaults on a Space.
    bare = hosted_settings(settings(), space(tmp_path), CPU_SPACE).settings
    assert (bare.host, bare.port) == ("0.0.0.0", 7860)


def test_without_persistent_storage_it_says_history_is_lost_on_restart(tmp_path):
    hosted = hosted_settings(settings(), space(tmp_path / "absent"), CPU_SPACE)
    assert not hosted.persistent
    assert hosted.settings.outputs_dir == settings().outputs_dir
    assert any("lost when the Space restarts" in note and "/data" in note for note in hosted.notes)


def test_storage_that_is_not_a_folder_is_not_used(tmp_path):
    storage = tmp_path / "data"
    storage.write_text("a file where the mount should be")
    hosted = hosted_settings(settings(), space(storage), CPU_SPACE)
    assert not hosted.persistent and hosted.settings.outputs_dir == settings().outputs_dir


def test_a_cpu_space_gets_limits_sized_for_its_cpus(tmp_path):
    hosted = hosted_settings(settings(), space(tmp_path), CPU_SPACE).settings
    assert hosted.engine_threads == 2
    assert hosted.in_flight_slots == CPU_SPACE_LIMITS.in_flight_slots == 2
    assert hosted.visitor_max_in_flight == CPU_SPACE_LIMITS.visitor_max_in_flight
    assert hosted.visitor_max_queued == CPU_SPACE_LIMITS.visitor_max_queued
    assert hosted.visitor_max_videos_per_hour == CPU_SPACE_LIMITS.visitor_max_videos_per_hour


@pytest.mark.parametrize(
    ("values", "hardware"),
    [({}, GPU_SPACE), ({"engine": "remote", "remote_urls": ["http://gpu-node:8000"]}, CPU_SPACE)],
    ids=["gpu-space", "remote-servers"],
)
def test_a_gpu_space_or_remote_servers_get_batch_sized_limits(tmp_path, values, hardware):
    hosted = hosted_settings(settings(**values), space(tmp_path), hardware).settings
    assert hosted.engine_threads is None  # the engine's own choice
    assert hosted.in_flight_slots is None  # the studio's default: 8 per server, an engine's batch
    assert hosted.visitor_max_in_flight == GPU_SPACE_LIMITS.visitor_max_in_flight
    assert hosted.visitor_max_videos_per_hour == GPU_SPACE_LIMITS.visitor_max_videos_per_hour


def test_what_the_environment_sets_wins_over_the_space_defaults(tmp_path, monkeypatch):
    outputs = tmp_path / "elsewhere"
    monkeypatch.setenv("OMNI_STUDIO_PORT", "8123")
    monkeypatch.setenv("OMNI_STUDIO_VISITOR_MAX_QUEUED", "3")
    monkeypatch.setenv("OMNI_STUDIO_ENGINE_THREADS", "1")
    monkeypatch.setenv("OMNI_STUDIO_OUTPUTS_DIR", str(outputs))
    hosted = hosted_settings(settings(), space(tmp_path / "data", server_port=7860), CPU_SPACE)
    assert hosted.settings.port == 8123
    assert hosted.settings.visitor_max_queued == 3
    assert hosted.settings.engine_threads == 1
    assert hosted.settings.outputs_dir == outputs
    assert not hosted.persistent  # outside the Space's storage
    assert hosted.settings.visitor_max_in_flight == CPU_SPACE_LIMITS.visitor_max_in_flight  # the rest still apply


def test_the_space_variables_are_read_by_their_own_names(monkeypatch, tmp_path):
    monkeypatch.setenv("SPACE_ID", "someone/studio")
    monkeypatch.setenv("GRADIO_SERVER_NAME", "0.0.0.0")
    monkeypatch.setenv("GRADIO_SERVER_PORT", "7860")
    monkeypatch.setenv("OMNI_STUDIO_SPACE_DATA", str(tmp_path))
    environment = SpaceEnvironment()
    assert environment.on_space and environment.space_id == "someone/studio"
    assert (environment.server_name, environment.server_port, environment.storage) == ("0.0.0.0", 7860, tmp_path)
    monkeypatch.delenv("SPACE_ID")
    monkeypatch.delenv("OMNI_STUDIO_SPACE_DATA")
    assert not SpaceEnvironment().on_space and SpaceEnvironment().storage == Path("/data")
