"""Fleet layouts for the bench: REPLICASxWIDTH parsed, and each checked against the GPUs before anything starts."""

import pytest

from studio.backend.servers.layouts import (
    Layout,
    LayoutError,
    layout_settings,
    parse_layouts,
    plan_layout,
    settings_layout,
)
from studio.config import TINY_WAN_DIR, StudioSettings

FOUR_GPUS = ["0", "1", "2", "3"]


def settings(**values) -> StudioSettings:
    return StudioSettings(_env_file=None, **values)


def vllm(**values) -> StudioSettings:
    return settings(engine="vllm-omni", **values)


def test_layouts_parse_from_text_or_a_list():
    assert parse_layouts("1x4, 2x2,4X1") == [Layout(1, 4), Layout(2, 2), Layout(4, 1)]
    assert parse_layouts(["2x1", Layout(1, 1)]) == [Layout(2, 1), Layout(1, 1)]
    assert [str(layout) for layout in parse_layouts("1x4,2x2")] == ["1x4", "2x2"]
    assert parse_layouts("") == [] and parse_layouts(None) == [] and parse_layouts(" , ") == []


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("2y2", "layouts take REPLICASxWIDTH separated by commas, e.g. 1x4,2x2,4x1; got '2y2'"),
        ("4", "got '4'"),
        ("1x-1", "got '1x-1'"),
        ("0x1", "layout 0x1: replicas must be between 1 and 64"),
        ("1x0", "layout 1x0: width must be between 1 and 64"),
        ("65x1", "replicas must be between 1 and 64"),
        ("1x1,2x1,1x1", "layout 1x1 is listed twice"),
    ],
)
def test_a_bad_layout_is_refused_by_name(text, message):
    with pytest.raises(LayoutError) as refused:
        parse_layouts(text)
    assert message in str(refused.value)


def test_the_settings_give_the_default_layout():
    assert settings_layout(vllm(replicas=2, tensor_parallel_size=4)) == Layout(2, 4)
    # The embedded engine runs a request on one device, whatever --tp says.
    assert settings_layout(settings(replicas=3, tensor_parallel_size=2)) == Layout(3, 1)


def test_a_layout_sets_replicas_and_tensor_parallel_of_vllm_omni():
    fleet = layout_settings(vllm(tensor_parallel_size=1, extra_serve_args="--enforce-eager"), Layout(2, 4))
    assert (fleet.replicas, fleet.tensor_parallel_size, fleet.extra_serve_args) == (2, 4, "--enforce-eager")
    embedded = layout_settings(settings(), Layout(3, 1))
    assert (embedded.replicas, embedded.tensor_parallel_size) == (3, 1)


@pytest.mark.parametrize(
    ("width", "cfg", "ulysses"), [(1, 1, 1), (2, 2, 1), (3, 1, 3), (4, 2, 2), (8, 2, 4)], ids=lambda v: str(v)
)
def test_the_embedded_engines_width_is_its_own_parallelism(width: int, cfg: int, ulysses: int):
    """Guidance halves first, then the tokens: the fleet's width in devices per request, and back."""
    fleet = layout_settings(settings(model=str(TINY_WAN_DIR)), Layout(2, width))
    assert (fleet.replicas, fleet.cfg_parallel_size, fleet.ulysses_degree) == (2, cfg, ulysses)
    assert settings_layout(fleet) == Layout(2, width)


def test_a_model_the_engine_cannot_spread_takes_width_one_and_says_why():
    with pytest.raises(LayoutError) as refused:
        layout_settings(settings(), Layout(1, 2))  # the default model: the small one, not a Wan pipeline
    message = str(refused.value)
    assert message.startswith("layout 1x2: the embedded engine runs one request on several devices for Wan")
    assert "OmniSmallT2VPipeline" in message and "e.g. 2x1" in message


def test_remote_servers_have_no_layout():
    with pytest.raises(LayoutError, match="the remote engine attaches to servers that already run"):
        layout_settings(settings(engine="remote", remote_urls=["http://127.0.0.1:9"]), Layout(1, 1))


@pytest.mark.parametrize(
    ("layout", "groups"),
    [
        (Layout(1, 4), [["0", "1", "2", "3"]]),
        (Layout(2, 2), [["0", "1"], ["2", "3"]]),
        (Layout(4, 1), [["0"], ["1"], ["2"], ["3"]]),
        (Layout(1, 2), [["0", "1"]]),  # a layout may leave GPUs idle
    ],
)
def test_each_replica_gets_its_own_gpus(layout, groups):
    replicas = plan_layout(vllm(), layout, FOUR_GPUS)
    assert [replica.gpus for replica in replicas] == groups
    assert [replica.settings.gpus for replica in replicas] == [",".join(group) for group in groups]
    assert {replica.settings.tensor_parallel_size for replica in replicas} == {layout.width}


def test_too_few_gpus_is_refused_naming_the_layout_and_the_count():
    with pytest.raises(LayoutError) as refused:
        plan_layout(vllm(), Layout(2, 4), FOUR_GPUS)
    message = str(refused.value)
    assert message.startswith("layout 2x4: ") and "need 8 GPUs" in message and "has 4" in message
    # cfg parallel doubles a replica's GPUs: 2x2 with it needs 8 too.
    with pytest.raises(LayoutError, match="need 8 GPUs"):
        plan_layout(vllm(cfg_parallel_size=2), Layout(2, 2), FOUR_GPUS)


def test_gpus_named_with_gpus_are_the_ones_used():
    replicas = plan_layout(vllm(gpus="4,5"), Layout(2, 1), FOUR_GPUS)
    assert [replica.gpus for replica in replicas] == [["4"], ["5"]]
    with pytest.raises(LayoutError, match="--gpus 4,5 has 2"):
        plan_layout(vllm(gpus="4,5"), Layout(1, 4), FOUR_GPUS)


def test_embedded_replicas_share_the_cpu_or_take_a_gpu_each():
    on_cpu = plan_layout(settings(), Layout(2, 1), [])
    assert [replica.gpus for replica in on_cpu] == [None, None]
    assert all(replica.settings.engine_threads for replica in on_cpu)  # each its share of the cores
    on_gpus = plan_layout(settings(), Layout(2, 1), ["0", "1"])
    assert [replica.gpus for replica in on_gpus] == [["0"], ["1"]]
    with pytest.raises(LayoutError, match=r"layout 3x1: .*need 3 GPUs"):
        plan_layout(settings(), Layout(3, 1), ["0", "1"])
    # Told to stay on the CPU, GPUs found are not a limit.
    assert len(plan_layout(settings(device="cpu"), Layout(3, 1), ["0"])) == 3
