"""Both kinds of replica, a server process on this machine (ManagedServer) and one in a Ray actor (RayServer), are a
Replica: each has every member the protocol declares, of the same kind (attribute, property or method, a method with
the same parameters); and the fleet manager holds its servers as Replica, never as one of the two classes."""

from __future__ import annotations

import inspect
import typing

import pytest

from studio.backend.servers import fleet_manager
from studio.backend.servers.fleet_manager import FleetManager
from studio.backend.servers.ray_fleet import RayServer
from studio.backend.servers.replica import Replica
from studio.backend.servers.supervisor import ManagedServer


def protocol_members() -> dict[str, str]:
    """Each member the protocol declares, and its kind."""
    members = dict.fromkeys(Replica.__annotations__, "attribute")
    for name, value in vars(Replica).items():
        if name.startswith("_"):
            continue
        if isinstance(value, property):
            members[name] = "property"
        elif inspect.isfunction(value):
            members[name] = "method"
    return members


def made(cls: type) -> object:
    """One of the class, never started: making one starts no process and calls no actor."""
    if cls is ManagedServer:
        return ManagedServer(lambda port: pytest.fail("never launched"), name="replica 0")
    return RayServer(actor=None, name="replica 0", log_path=None, init_timeout_s=1.0)


def kind_of(cls: type, instance: object, name: str) -> str | None:
    found = inspect.getattr_static(cls, name, None)
    if isinstance(found, property):
        return "property"
    if inspect.isfunction(found):
        return "method"
    if found is None and name in vars(instance):
        return "attribute"
    return None


def parameters(function: typing.Callable) -> list[tuple[str, object]]:
    return [(p.name, p.default) for p in inspect.signature(function).parameters.values()]


def test_the_protocol_declares_what_the_fleet_and_the_page_use():
    members = protocol_members()
    assert {name for name, kind in members.items() if kind == "property"} == {"base_url", "node"}
    assert {"start", "stop", "restart", "wait_ready", "on_exit", "status", "log_tail", "crash_lines"} <= set(members)
    assert {"name", "gpus", "port", "state", "exit_code"} <= set(members)


@pytest.mark.parametrize("cls", [ManagedServer, RayServer])
def test_each_server_class_has_every_member_of_the_protocol_of_its_kind(cls):
    instance = made(cls)
    kinds = {name: kind_of(cls, instance, name) for name in protocol_members()}
    assert kinds == protocol_members()
    for name, kind in protocol_members().items():
        if kind == "method":
            assert parameters(getattr(cls, name)) == parameters(getattr(Replica, name)), name


def test_a_server_on_this_machine_names_no_node():
    assert made(ManagedServer).node is None  # type: ignore[attr-defined]


def types_named(hint: object) -> set[object]:
    """`hint` and every type inside it (list[Replica] | None: the union, list[Replica], Replica, None)."""
    found = {hint}
    for inner in typing.get_args(hint):
        found |= types_named(inner)
    return found


def test_the_fleet_manager_holds_its_servers_as_replicas():
    functions = [
        value.fget if isinstance(value, property) else value
        for value in [*vars(FleetManager).values(), *vars(fleet_manager).values()]
        if isinstance(value, property) or inspect.isfunction(value)
    ]
    named: set[object] = set()
    for function in functions:
        if function.__module__ == fleet_manager.__name__:
            named |= {t for hint in typing.get_type_hints(function).values() for t in types_named(hint)}
    assert Replica in named
    assert not named & {ManagedServer, RayServer}
    assert typing.get_type_hints(FleetManager.replica)["return"] is Replica
    assert typing.get_type_hints(FleetManager.__init__)["servers"] == list[Replica] | None
    assert not hasattr(fleet_manager, "ManagedServer")
