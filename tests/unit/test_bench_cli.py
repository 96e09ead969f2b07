"""`omni-studio bench`'s flags: the fleet's are the studio's settings, the bench's are its form's."""

import pytest

from studio.backend.bench.config import BenchConfigError
from studio.backend.servers.layouts import Layout
from studio.cli import build_parser
from studio.cli.bench import BenchCommand, _config
from studio.cli.studio_flags import studio_settings
from studio.settings_flags import model_values


def parse(*argv: str):
    args = build_parser().parse_args(["bench", "--out", "report", *argv])
    return args, BenchCommand(**model_values(args, BenchCommand))


def test_replicas_is_the_settings_field_and_layouts_the_forms():
    args, command = parse("--replicas", "3", "--tp", "2", "--layouts", "1x4,2x2")
    assert "replicas" not in BenchCommand.model_fields
    settings = studio_settings(args)
    assert (settings.replicas, settings.tensor_parallel_size) == (3, 2)
    assert _config(args, command).layouts == [Layout(1, 4), Layout(2, 2)]


def test_variants_come_from_a_file(tmp_path):
    path = tmp_path / "variants.toml"
    path.write_text('base = ""\nbatch1 = "--max-batch 1"\n')
    args, command = parse("--variants", str(path))
    assert _config(args, command).variants == {"base": "", "batch1": "--max-batch 1"}
    path.write_text("# nothing here\n")
    with pytest.raises(BenchConfigError, match="has no variants"):
        _config(*parse("--variants", str(path)))
    path.write_text("base = \n")
    with pytest.raises(BenchConfigError, match=r"variants\.toml: not TOML"):
        _config(*parse("--variants", str(path)))
