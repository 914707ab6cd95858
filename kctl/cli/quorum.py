"""kctl quorum: the KRaft controller quorum (static or dynamic, its voters with their directory ids and lag, its
observers), its conversion to a dynamic quorum (KIP-853, Kafka 4.1+), and a voter's add or remove by Kafka's
add-controller / remove-controller (docs/kraft.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from kctl import output
from kctl.cli.common import OutputOpt, SpecOpt, connect

MaxLagOpt = typer.Option(100, "--max-lag", min=0, help="Records of the metadata log a voter (or the joiner) may be"
                                                       " behind the leader for the change to go on.")


def register(app: typer.Typer) -> None:
    qa = typer.Typer(help="The KRaft controller quorum: status, make-dynamic, add-controller, remove-controller.",
                     invoke_without_command=True)
    qa.callback()(quorum_show)
    qa.command("make-dynamic")(quorum_make_dynamic)
    qa.command("add-controller")(quorum_add_controller)
    qa.command("remove-controller")(quorum_remove_controller)
    app.add_typer(qa, name="quorum")


def quorum_show(ctx: typer.Context, file: Path = SpecOpt, fmt: output.Format = OutputOpt) -> None:
    """The quorum: static or dynamic (kraft.version), its leader, each voter's directory id and lag, observers."""
    if ctx.invoked_subcommand is not None:
        return
    from kctl.cluster import quorum

    spec = connect(file).kctl_spec
    st = quorum.status(spec)
    rows: list[dict[str, Any]] = [{**v, "role": "voter"} for v in st.voters] + [
        {**o, "role": "observer"} for o in st.observers]
    kind = "dynamic" if st.dynamic else "static"
    footer = [f"{kind} quorum (kraft.version {st.kraft_version}); leader {st.leader}, epoch {st.epoch},"
              f" high watermark {st.high_watermark}; kctl renders {st.rendered}"]
    if not st.dynamic:
        footer.append(f"a voter is added or removed only in a dynamic quorum: `{quorum.MAKE_DYNAMIC}` (Kafka 4.1+)")
    footer += [f"problem: {p}" for p in st.problems]
    output.emit(st, fmt, rows=rows, columns=["id", "node", "role", "status", "directory_id", "log_end_offset", "lag"],
                title=f"controller quorum of {spec.name}", footer="\n".join(footer))
    if st.problems:
        raise typer.Exit(1)


def quorum_make_dynamic(yes: bool = typer.Option(False, "--yes", "-y", help="Do not ask for confirmation."),
                        timeout: float = typer.Option(300, "--timeout", min=1, help="Seconds each gate of the roll"
                                                                                    " may take."),
                        file: Path = SpecOpt, fmt: output.Format = OutputOpt) -> None:
    """Convert a static quorum to dynamic (Kafka 4.1+): kraft.version raised to 1, then every node rolled (gated)
    onto controller.quorum.bootstrap.servers. Not undone: Kafka lowers no kraft.version. Rerun resumes."""
    from kctl.cluster import quorum
    from kctl.cluster.lock import roll_lock
    from kctl.model.spec import load_cluster, state_dir_for
    from kctl.roll import apply as ap

    spec = connect(file, write=True).kctl_spec
    state = state_dir_for(spec, file)
    if not yes:
        typer.confirm(f"make the controller quorum of {spec.name} dynamic (kraft.version 1; not made static"
                      " again) and roll every node onto controller.quorum.bootstrap.servers?", abort=True)
    with roll_lock(state, "kctl quorum make-dynamic"):
        said = quorum.make_dynamic(spec, state, output.info)
    spec, _ = load_cluster(file)  # kraft.json now says dynamic: the render names the bootstrap servers
    result = ap.apply(spec, state, gate_timeout=timeout, progress=output.info)
    output.emit_change({"kraft_version": 1, "said": said, "rolled": result}, fmt,
                       f"{spec.name}: the controller quorum is dynamic ({said}); every node names"
                       " controller.quorum.bootstrap.servers")


def quorum_add_controller(node: str = typer.Argument(..., help="The node (loggerN or id) whose controller joins."),
                          max_lag: int = MaxLagOpt,
                          timeout: float = typer.Option(300, "--timeout", min=1, help="Seconds to wait for it to"
                                                                                      " catch up."),
                          file: Path = SpecOpt, fmt: output.Format = OutputOpt) -> None:
    """Make a node's controller a voter: it runs as an observer (formatted to join), catches up, then add-controller.
    `kctl node add --role controller` does it for a new node; here for a rebuilt one, or to finish an interrupted
    add."""
    from kctl.cluster import quorum
    from kctl.cluster.lock import roll_lock
    from kctl.model.spec import state_dir_for

    spec = connect(file, write=True).kctl_spec
    host = spec.zk_host(spec.node(node))
    with roll_lock(state_dir_for(spec, file), "kctl quorum add-controller"):
        said = quorum.add_controller(spec, host, timeout=timeout, max_lag=max_lag, say=output.info)
    output.emit_change({"node": host, "said": said}, fmt, said)


def quorum_remove_controller(
        node: str = typer.Argument(..., help="The node (loggerN or id) or the controller id (3000 + N) to remove."),
        directory_id: str = typer.Option(None, "--directory-id", help="The voter's directory id (default: the one"
                                                                       " the quorum names for it)."),
        force: bool = typer.Option(False, "--force", help="Accept fewer than 3 voters left (a failed controller's"
                                                          " replacement: remove, reformat, add back)."),
        max_lag: int = MaxLagOpt,
        yes: bool = typer.Option(False, "--yes", "-y", help="Do not ask for confirmation."),
        file: Path = SpecOpt, fmt: output.Format = OutputOpt) -> None:
    """Remove a voter from the dynamic quorum (remove-controller with its directory id); its node stays in kctl.yaml
    (`kctl node remove` removes the whole node). The way to drop a controller whose storage is lost."""
    from kctl.cluster import quorum
    from kctl.cluster.lock import roll_lock
    from kctl.model.spec import state_dir_for

    spec = connect(file, write=True).kctl_spec
    if not yes:
        typer.confirm(f"remove controller {node} from the quorum of {spec.name}?", abort=True)
    with roll_lock(state_dir_for(spec, file), "kctl quorum remove-controller"):
        said = quorum.remove_controller(spec, node, directory=directory_id, force=force, max_lag=max_lag,
                                        say=output.info)
    output.emit_change({"controller": node, "said": said}, fmt, said)
