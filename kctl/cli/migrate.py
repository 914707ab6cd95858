"""kctl migrate kraft: leave ZooKeeper for a KRaft controller quorum, one phase at a time (docs/runbooks/
migrate-to-kraft.md)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from kctl import output
from kctl.cli.common import OutputOpt, SpecOpt, connect

if TYPE_CHECKING:
    from kctl.model.spec import ClusterSpec

YesOpt = typer.Option(False, "--yes", "-y", help="Do not ask for confirmation.")
TimeoutOpt = typer.Option(300, "--timeout", min=1, help="Seconds each roll gate may wait before the roll stops.")


def register(app: typer.Typer) -> None:
    migrate_app = typer.Typer(help="Move a running cluster to another metadata mode.", no_args_is_help=True)
    kraft_app = typer.Typer(help="ZooKeeper to KRaft (Kafka's documented phases): zookeeper, controllers,"
                                 " dual-write, kraft-brokers, kraft.", no_args_is_help=True)
    kraft_app.command("status")(kraft_status)
    kraft_app.command("plan")(kraft_plan)
    kraft_app.command("next")(kraft_next)
    kraft_app.command("rollback")(kraft_rollback)
    kraft_app.command("finalize")(kraft_finalize)
    kraft_app.command("raise-metadata-version")(kraft_raise_metadata_version)
    migrate_app.add_typer(kraft_app, name="kraft")
    app.add_typer(migrate_app, name="migrate")


def kraft_status(file: Path = SpecOpt, fmt: output.Format = OutputOpt) -> None:
    """The phase (the state dir's record), a step under way, and what the controllers and ZooKeeper say."""
    from kctl.migrate import kraft as migrate
    from kctl.model.spec import state_dir_for

    spec = connect(file).kctl_spec
    st = migrate.status(spec, state_dir_for(spec, file))
    rows = [{"what": "phase", "value": st["phase"]},
            {"what": "under way", "value": (f"{st['under_way']['action']} to {st['under_way']['target']} (done:"
                                            f" {', '.join(st['under_way']['done']) or 'nothing yet'})"
                                            if st["under_way"] else "nothing")},
            {"what": "cluster id", "value": st["cluster_id"] or "-"}]
    if st["kept"]:
        kept = ", ".join(f"{k} {v or '(none)'}" for k, v in st["kept"].items())
        rows.append({"what": "kctl.yaml keeps", "value": f"{kept} (until the migration is finalized or rolled back)"})
    if st["metadata_version"]:
        rows.append({"what": "metadata.version", "value": f"{st['metadata_version']} (no older release runs it)"})
    if st.get("formatted"):
        made = st["formatted"]
        level = made["metadata_version"] or "(its default)"
        rows.append({"what": "storage formatted", "value": f"at metadata.version {level} by Kafka {made['release']}"
                                                           " (no older release starts on it)"})
    if st["metadata_version_pending"]:
        owed = st["metadata_version_pending"]
        rows.append({"what": "metadata.version raise", "value": f"owed (the roll onto Kafka {owed['release']} did not"
                                                               f" raise it): run `{owed['run']}`"})
    for host, state in (st.get("controllers") or {}).items():
        rows.append({"what": f"controller on {host}", "value": state})
    if "quorum" in st:
        q = st["quorum"]
        rows.append({"what": "controller quorum", "value": q.get("error") or
                     f"leader {q['leader']} (epoch {q['epoch']}), voters {q['voters']}, max follower lag"
                     f" {q['max_follower_lag']}"})
        rows.append({"what": "metadata migrated", "value": (f"yes (by {st['metadata_migrated_by']})"
                                                            if st["metadata_migrated_by"] else "not yet")})
    output.emit(st, fmt, rows=rows, columns=["what", "value"], title=f"{spec.name}: migration to KRaft",
                footer=(f"next: `kctl migrate kraft next` ({st['next']})" if st["next"] else
                        "next: `kctl migrate kraft finalize` (cannot be undone), or `kctl migrate kraft rollback`"
                        if st["phase"] == "kraft-brokers" and not st["under_way"] else None))


def kraft_plan(file: Path = SpecOpt, fmt: output.Format = OutputOpt) -> None:
    """Every step from the cluster's phase to KRaft; changes nothing."""
    from kctl.kraft import phases
    from kctl.migrate import kraft as migrate
    from kctl.model.spec import state_dir_for

    spec = connect(file).kctl_spec
    rows = migrate.describe_plan(phases.read(state_dir_for(spec, file)))
    output.emit(rows, fmt, rows=rows, columns=["command", "from", "to", "step", "what"],
                title=f"{spec.name}: the way to KRaft")


def kraft_next(yes: bool = YesOpt, timeout: float = TimeoutOpt, file: Path = SpecOpt,
               fmt: output.Format = OutputOpt) -> None:
    """Advance one phase (resumes a step under way); never finalizes."""
    _run("next", yes, timeout, file, fmt)


def kraft_rollback(yes: bool = YesOpt, timeout: float = TimeoutOpt, file: Path = SpecOpt,
                   fmt: output.Format = OutputOpt) -> None:
    """Go back to ZooKeeper mode (before finalizing only), through the steps Kafka documents for the phase."""
    _run("rollback", yes, timeout, file, fmt)


def kraft_finalize(yes: bool = YesOpt, timeout: float = TimeoutOpt, file: Path = SpecOpt,
                   fmt: output.Format = OutputOpt) -> None:
    """Leave ZooKeeper for good (from kraft-brokers): the controllers restarted without it, ZooKeeper retired.
    No rollback afterwards."""
    _run("finalize", yes, timeout, file, fmt)


def _run(action: str, yes: bool, timeout: float, file: Path, fmt: output.Format) -> None:
    from kctl.kraft import phases
    from kctl.migrate import kraft as migrate
    from kctl.model.spec import state_dir_for

    def refusals(s: ClusterSpec) -> None:  # from kctl.yaml and the record alone: before any cluster is asked
        s.check_migration()  # kctl.yaml changed under a migration under way: named as such, first
        migrate.check_can_migrate(s, action)

    spec = connect(file, write=True, before=refusals).kctl_spec
    state_dir = state_dir_for(spec, file)
    record = phases.read(state_dir)
    target, steps = migrate.plan(record, action)  # refusals before the question
    if not yes:
        final = " This cannot be undone: no rollback to ZooKeeper afterwards." if action == "finalize" else ""
        source, stop = record.phase.value, ""
        if phases.can_abort(record, action) and record.target:
            source = record.target.value
            stop = f" (stopping the next to it under way: steps done {', '.join(record.done) or 'none'})"
        typer.confirm(f"{action}: {spec.name} from {source}{stop} to {target.value} ({', '.join(steps)})?{final}",
                      abort=True)
    res = migrate.run(spec, state_dir, action, progress=output.info, gate_timeout=timeout)
    output.emit_change(res, fmt, f"{spec.name}: {action} from {res.source} to {res.phase} in {res.seconds:.1f}s")


def kraft_raise_metadata_version(file: Path = SpecOpt, fmt: output.Format = OutputOpt) -> None:
    """Raise metadata.version to the newest level every node's release supports (cannot be undone): what `kctl
    apply` of a new release does last; `kctl migrate kraft status` says when one is owed."""
    from kctl.migrate import kraft as migrate
    from kctl.model.spec import state_dir_for

    spec = connect(file).kctl_spec
    before, after = migrate.raise_metadata_version(spec, state_dir_for(spec, file), progress=output.info)
    said = f"{before} -> {after}" if after != before else f"{before} (the newest Kafka {spec.versions.kafka} supports)"
    output.emit({"cluster": spec.name, "before": before, "after": after}, fmt,
                rows=[{"what": "metadata.version", "value": said}], columns=["what", "value"], title=spec.name)
