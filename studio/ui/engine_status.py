"""The engine's state in one line, as the page shows it: which engine, and whether it can take work; for operators
also where (addresses, the layout) and why (start errors, a crash's message)."""

from __future__ import annotations

from studio.backend.face import ServerState, StudioController


def _model_name(served: str) -> str:
    """A served model as a visitor may see it: its last name, not the folder or hub path it was loaded from."""
    return served.rstrip("/").rsplit("/", 1)[-1] or served


def engine_summary(controller: StudioController, for_operator: bool = True) -> str:
    """One line for the page: which engine, and whether it can take work. For operators it says where (server
    addresses, the layout) and why (start errors, a crash's message); `for_operator=False` gives the same state
    without addresses, ports, paths or error text: what every visitor's page may show (public_summary)."""
    fleet = controller.fleet
    served = fleet.served_model if for_operator or not fleet.served_model else _model_name(fleet.served_model)
    serving = f", serving {served}" if served else ""
    kind = controller.kind.label
    if not controller.managed:
        if fleet.pool is None:
            return f"{kind}: not attached"
        where = ", ".join(controller.settings.remote_urls) if for_operator else f"{len(fleet.pool.endpoints)} attached"
        return f"{kind}: {where}{serving}"
    if fleet.start_error:
        if not for_operator:
            return f"{kind}: failed to start (an operator can see why)"
        return f"{kind} failed to start: {fleet.start_error}"
    if len(fleet.servers) > 1 or (controller.settings.scales and fleet.servers):
        states = [server.state for server in fleet.servers]
        ready = states.count(ServerState.READY)
        others = ", ".join(
            f"{states.count(state)} {state}"
            for state in ServerState
            if state in states and state is not ServerState.READY
        )
        layout = (
            f"{fleet.layout}: {ready} of {len(states)} ready"
            if for_operator
            else (f"{ready} of {len(states)} replicas ready")
        )
        return f"{kind}: {layout}" + (f" ({others})" if others else "") + serving
    status = fleet.server_status()
    if status is None:
        return f"{kind}: not started"
    if status.state is ServerState.STARTING:
        return f"{kind}: starting ({status.starting_for_s or 0:.0f} s)"
    if status.state is ServerState.READY:
        where = f" at {status.url}" if for_operator else ""
        return f"{kind}: ready{where}{serving} (started in {status.startup_s or 0:.1f} s)"
    if not for_operator:
        return f"{kind}: {status.state}"
    # The message may name the state already ("stopped"): said once.
    said = status.message if status.message.startswith(str(status.state)) else f"{status.state} {status.message}"
    return f"{kind}: {said.strip()}"


def public_summary(controller: StudioController) -> str:
    """The engine's state for every visitor's page: engine_summary without addresses, ports or paths."""
    return engine_summary(controller, for_operator=False)
