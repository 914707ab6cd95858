"""kctl user, acl, quota, client-config: who may do what on a secured cluster, and how clients reach it."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from kctl import output
from kctl.cli.common import OutputOpt, SpecOpt, connect, load
from kctl.errors import UsageError
from kctl.output import Format

_STDIN = typer.Option(False, "--password-stdin", help="Read the password from stdin (default: generate one).")
_ALLOW = typer.Option(None, "--allow", help="Grant to this principal (User:NAME).")
_DENY = typer.Option(None, "--deny", help="Deny to this principal (User:NAME).")
_OPERATION = typer.Option(..., "--operation", help="read, write, create, delete, alter, describe, all, ...")
_TOPIC = typer.Option(None, "--topic", help="A topic (or, with --prefixed, a topic name prefix).")
_GROUP = typer.Option(None, "--group", help="A consumer group (or, with --prefixed, a prefix).")
_CLUSTER = typer.Option(False, "--cluster", help="The cluster resource.")
_PREFIXED = typer.Option(False, "--prefixed", help="The name is a prefix (PREFIXED pattern).")
_HOST = typer.Option("*", "--host", help="Client host the ACL applies to.")


def register(app: typer.Typer) -> None:
    user_app = typer.Typer(help="SCRAM users of a secured cluster.", no_args_is_help=True)
    user_app.command("create")(user_create)
    user_app.command("passwd")(user_passwd)
    user_app.command("delete")(user_delete)
    user_app.command("list")(user_list)
    app.add_typer(user_app, name="user")
    acl_app = typer.Typer(help="ACLs of a secured cluster (AclAuthorizer).", no_args_is_help=True)
    acl_app.command("add")(acl_add)
    acl_app.command("remove")(acl_remove)
    acl_app.command("list")(acl_list)
    app.add_typer(acl_app, name="acl")
    quota_app = typer.Typer(help="Client quotas of users and client ids, and their defaults.", no_args_is_help=True)
    quota_app.command("set")(quota_set)
    quota_app.command("delete")(quota_delete)
    app.add_typer(quota_app, name="quota")
    app.command("client-config")(client_config)
    cert_app = typer.Typer(help="The secured profile's certificates: their expiry and their renewal.",
                           no_args_is_help=True)
    cert_app.command("status")(cert_status)
    cert_app.command("renew")(cert_renew)
    cert_app.command("rotate-ca")(cert_rotate_ca)
    app.add_typer(cert_app, name="cert")


def _read_password(stdin: bool) -> str | None:
    if not stdin:
        return None
    pw = sys.stdin.readline().rstrip("\r\n")
    if not pw:
        raise UsageError("--password-stdin: no password on stdin")
    return pw


def user_create(
    name: str = typer.Argument(..., help="User name."),
    password_stdin: bool = _STDIN,
    file: Path = SpecOpt,
    fmt: Format = OutputOpt,
) -> None:
    """Create a SCRAM user; its password (read from stdin or generated) is kept 0600 in the state dir."""
    from kctl.kafka import security

    spec = connect(file, write=True).kctl_spec
    res = security.set_password(spec, name, _read_password(password_stdin), create=True)
    output.emit_change(res, fmt, f"created user {name} ({res.mechanism}); password in {res.password_file};"
                                 f" it may do nothing until `kctl acl add --allow User:{name} ...`")


def user_passwd(
    name: str = typer.Argument(..., help="User name."),
    password_stdin: bool = _STDIN,
    file: Path = SpecOpt,
    fmt: Format = OutputOpt,
) -> None:
    """Change a user's password (read from stdin or generated)."""
    from kctl.kafka import security

    spec = connect(file, write=True).kctl_spec
    res = security.set_password(spec, name, _read_password(password_stdin), create=False)
    output.emit_change(res, fmt, f"changed the password of {name}; kept in {res.password_file}")


def user_delete(name: str = typer.Argument(..., help="User name."), file: Path = SpecOpt,
                fmt: Format = OutputOpt) -> None:
    """Delete a user's SCRAM credentials (its ACLs stay: `kctl acl remove`)."""
    from kctl.kafka import security

    spec = connect(file, write=True).kctl_spec
    res = security.delete_user(spec, name)
    output.emit_change(res, fmt, f"deleted user {name}")


def user_list(file: Path = SpecOpt, fmt: Format = OutputOpt) -> None:
    """The users with SCRAM credentials."""
    from kctl.kafka import security

    spec = connect(file).kctl_spec
    rows = security.list_users(spec)
    output.emit(rows, fmt, columns=["user", "mechanisms", "password_kept", "super_user"])


def _principal(allow: str | None, deny: str | None) -> tuple[str, bool]:
    if bool(allow) == bool(deny):
        raise UsageError("pass exactly one of --allow User:NAME or --deny User:NAME")
    return (allow, True) if allow else (str(deny), False)


def acl_add(allow: str | None = _ALLOW, deny: str | None = _DENY, operation: str = _OPERATION,
            topic: str | None = _TOPIC, group: str | None = _GROUP, cluster: bool = _CLUSTER,
            prefixed: bool = _PREFIXED, host: str = _HOST, file: Path = SpecOpt, fmt: Format = OutputOpt) -> None:
    """Add an ACL: allow or deny a principal an operation on a topic, a group or the cluster."""
    from kctl.kafka import security

    principal, ok = _principal(allow, deny)
    spec = connect(file, write=True).kctl_spec
    res = security.add_acl(spec, principal, ok, operation, topic=topic, group=group, cluster=cluster,
                           prefixed=prefixed, host=host)
    a = res.acls[0]
    output.emit_change(res, fmt, f"added: {a.permission} {a.principal} {a.operation} on {a.resource_type}"
                                 f" {a.resource} ({a.pattern})")


def acl_remove(allow: str | None = _ALLOW, deny: str | None = _DENY, operation: str = _OPERATION,
               topic: str | None = _TOPIC, group: str | None = _GROUP, cluster: bool = _CLUSTER,
               prefixed: bool = _PREFIXED, host: str = _HOST, file: Path = SpecOpt,
               fmt: Format = OutputOpt) -> None:
    """Remove the ACL that `acl add` with the same arguments added."""
    from kctl.kafka import security

    principal, ok = _principal(allow, deny)
    spec = connect(file, write=True).kctl_spec
    res = security.remove_acl(spec, principal, ok, operation, topic=topic, group=group, cluster=cluster,
                              prefixed=prefixed, host=host)
    output.emit_change(res, fmt, f"removed {len(res.acls)} ACL(s)")


def acl_list(principal: str | None = typer.Option(None, "--principal", help="Only this principal (User:NAME)."),
             topic: str | None = typer.Option(None, "--topic", help="Only ACLs on this topic."),
             group: str | None = typer.Option(None, "--group", help="Only ACLs on this group."),
             cluster: bool = _CLUSTER, file: Path = SpecOpt, fmt: Format = OutputOpt) -> None:
    """The ACLs, optionally of one principal or resource."""
    from kctl.kafka import security

    spec = connect(file).kctl_spec
    rows = security.list_acls(spec, principal, topic, group, cluster)
    output.emit(rows, fmt, columns=["principal", "permission", "operation", "resource_type", "resource", "pattern",
                                    "host"], footer=None if rows else "no ACLs")


_Q_USER = typer.Option(None, "--user", help="A user.")
_Q_CLIENT = typer.Option(None, "--client", help="A client id.")
_Q_USER_DEFAULT = typer.Option(False, "--user-default", help="The default of every user.")
_Q_CLIENT_DEFAULT = typer.Option(False, "--client-default", help="The default of every client id.")


def quota_set(
    pairs: list[str] = typer.Argument(..., help="producer_byte_rate=N consumer_byte_rate=N request_percentage=N"),
    user: str | None = _Q_USER, client: str | None = _Q_CLIENT, user_default: bool = _Q_USER_DEFAULT,
    client_default: bool = _Q_CLIENT_DEFAULT, file: Path = SpecOpt, fmt: Format = OutputOpt,
) -> None:
    """Set quotas of a user, a client id, both, or their defaults (kafka-configs in a node)."""
    from kctl.kafka import security

    values: dict[str, str] = {}
    for p in pairs:
        k, sep, v = p.partition("=")
        if not sep or not k:
            raise UsageError(f"{p!r} is not key=value", hint="e.g. producer_byte_rate=1048576")
        values[k] = v
    args = security.quota_entity(user, client, user_default, client_default)
    security.check_quotas(values)
    spec = connect(file, write=True).kctl_spec
    res = security.set_quota(spec, args, values)
    output.emit_change(res, fmt, f"{res.entity}: set " + ", ".join(f"{k}={v}" for k, v in values.items()))


def quota_delete(
    keys: list[str] = typer.Argument(..., help="Quota names to remove."),
    user: str | None = _Q_USER, client: str | None = _Q_CLIENT, user_default: bool = _Q_USER_DEFAULT,
    client_default: bool = _Q_CLIENT_DEFAULT, file: Path = SpecOpt, fmt: Format = OutputOpt,
) -> None:
    """Remove quotas of a user, a client id, or their defaults."""
    from kctl.kafka import security

    args = security.quota_entity(user, client, user_default, client_default)
    spec = connect(file, write=True).kctl_spec
    res = security.delete_quota(spec, args, keys)
    output.emit_change(res, fmt, f"{res.entity}: removed {', '.join(keys)}")


def client_config(
    user: str | None = typer.Option(None, "--user", help="A user made with `kctl user create` (default: admin)."),
    fmt: str = typer.Option("librdkafka", "--format", help="librdkafka, java or kcat (a file for `kcat -F`)."),
    out: Path | None = typer.Option(None, "--out", help="Write to this file (mode 0600) instead of stdout."),
    file: Path = SpecOpt,
) -> None:
    """The settings a client needs to reach the cluster: bootstrap, protocol, mechanism, user, password, CA."""
    from kctl.kafka import security

    spec = load(file)
    text = security.client_config(spec, user, fmt)
    if out is None:
        sys.stdout.write(text)
        return
    from kctl.security import store

    store.write_secret(out, text)
    output.info(f"wrote {out} (mode 0600)")


def cert_status(
    file: Path = SpecOpt,
    fmt: Format = OutputOpt,
) -> None:
    """The CA and every container's certificate: names, validity, days left, signed by the CA, the keystore
    Kafka serves, the CA each container trusts. Exit 1 when one is expired, expiring within
    monitoring.certificate_warn_days, or does not match."""
    from kctl.model.spec import state_dir_for
    from kctl.security import certs

    spec = load(file)
    found = certs.inventory(spec, state_dir_for(spec, file), warn_days=spec.monitoring.certificate_warn_days)
    rows = [{"certificate": c.name, "not_after": c.not_after[:19].replace("T", " "), "days_left": round(c.days_left),
             "signed_by_ca": c.signed_by_ca, "keystore": c.keystore or "-",
             "trusts_ca": "-" if c.trusts_ca is None else c.trusts_ca,
             "problems": "; ".join(c.problems) or "-", "sans": ", ".join(c.sans)} for c in found]
    bad = [c for c in found if c.problems]
    footer = (f"{len(bad)} certificate(s) need attention: `kctl cert renew` issues new ones from the same CA"
              if bad else f"every certificate valid for more than {spec.monitoring.certificate_warn_days:g} days")
    output.emit(found, fmt, rows=rows, columns=["certificate", "not_after", "days_left", "signed_by_ca", "keystore",
                                                "trusts_ca", "problems"], wide_columns=["sans"],
                title=f"certificates of {spec.name}", footer=footer)
    raise typer.Exit(1 if bad else 0)


def cert_renew(
    nodes: list[str] = typer.Argument(None, help="Containers whose certificate to renew (default: every one)."),
    yes: bool = typer.Option(False, "--yes", "-y", help="Do not ask for confirmation."),
    timeout: float = typer.Option(300, "--timeout", min=1, help="Seconds each gate of the roll may wait."),
    file: Path = SpecOpt,
) -> None:
    """New certificates from the same CA (clients that trust it go on trusting the brokers), served after a
    gated rolling restart of the brokers that hold them. Interrupted, a rerun renews and rolls again."""
    from kctl.model.properties import services_of
    from kctl.model.spec import state_dir_for
    from kctl.roll import run
    from kctl.security import certs

    spec = connect(file, write=True).kctl_spec
    if not spec.security.enabled:
        raise UsageError(f"cluster {spec.name!r} is not secured: it has no certificates",
                         hint="security.enabled in kctl.yaml (docs/security.md)")
    containers = [(h, n) for h, n, _services in services_of(spec)]
    hosts = sorted({h for ref in nodes for h, n in containers if h == ref or n.id == spec.node(ref).id}) \
        if nodes else None
    if not yes and not typer.confirm(f"renew the certificates of {', '.join(hosts or ['every container'])} and"
                                     " restart their brokers one at a time?"):
        raise typer.Exit(1)
    state = state_dir_for(spec, file)
    made = certs.renew(spec, state, hosts)
    output.info(f"made: {', '.join(made)}")
    brokers = [h for h, n, services in services_of(spec) if "kafka" in services and (hosts is None or h in hosts)]
    if brokers:
        result = run.roll(spec, state, service="kafka", nodes=brokers, gate_timeout=timeout, progress=output.info,
                          command="kctl cert renew")
        output.info(f"renewed and served: {len(result.plan.steps)} broker(s) restarted")


def cert_rotate_ca(
    all_steps: bool = typer.Option(False, "--all", help="Run every step left in one go (when kctl's own are the only"
                                                        " clients); by default one step, then what to do before the"
                                                        " next."),
    yes: bool = typer.Option(False, "--yes", "-y", help="Do not ask for confirmation."),
    timeout: float = typer.Option(300, "--timeout", min=1, help="Seconds each gate of the rolls may wait."),
    file: Path = SpecOpt,
) -> None:
    """A new CA in three steps, each ended by a gated roll of the brokers: trust (the new CA trusted beside the old),
    reissue (every certificate signed by the new CA), drop (the old CA no longer trusted). Interrupted, the next run
    does the step again."""
    from kctl.model.properties import services_of
    from kctl.model.spec import state_dir_for
    from kctl.roll import run
    from kctl.security import certs

    spec = connect(file, write=True).kctl_spec
    state = state_dir_for(spec, file)
    step = certs.rotation_step(state) or "trust"
    if not yes and not typer.confirm(f"rotate the CA of {spec.name}: step {step}"
                                     + (" and the ones after it" if all_steps else "")
                                     + ", each with a rolling restart of the brokers?"):
        raise typer.Exit(1)
    service = "node" if spec.on_kraft else "kafka"  # on KRaft the controllers serve its certificates too
    hosts = [h for h, _n, services in services_of(spec) if "kafka" in services]

    def roll() -> None:
        run.roll(spec, state, service=service, nodes=hosts, gate_timeout=timeout, progress=output.info,
                 command="kctl cert rotate-ca")

    ran = certs.rotate_ca(spec, state, roll, all_steps=all_steps, say=output.info)
    left = certs.rotation_step(state)
    output.info(f"CA rotation: {', '.join(ran)} done" + (
        f"; next: {left}. " + certs.BEFORE_STEP[left] if left else
        "; the new CA alone is trusted: clients outside kctl take the new secrets/ca.pem"))
