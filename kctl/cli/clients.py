"""`kctl produce` and `kctl consume`: the console producer and consumer."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from kctl import output
from kctl.cli.common import BootstrapOpt, OutputOpt, SpecOpt, connect, connect_by_metadata
from kctl.output import Format

UserOpt = typer.Option(None, "--user", help="Secured cluster: act as this user (`kctl user create`), not the admin.")


def produce(
    topic: str = typer.Argument(..., help="Topic to write to."),
    input_file: Path | None = typer.Option(None, "--input", "-i", help="Read lines from this file (default stdin)."),
    key_separator: str | None = typer.Option(None, "--key-separator", help="Split each line into key and value."),
    acks: str = typer.Option("all", "--acks", help="all, 1 or 0."),
    timeout: float = typer.Option(30.0, "--timeout", help="Seconds a record may wait for its acknowledgement."),
    user: str | None = UserOpt,
    bootstrap: str | None = BootstrapOpt,
    file: Path = SpecOpt,
    fmt: Format = OutputOpt,
) -> None:
    """One record per input line (kafka-console-producer.sh); exits 1 if any delivery failed."""
    from kctl.kafka import console

    target = connect(file, bootstrap, write=True).as_user(user)
    res = console.produce(target, topic, input_file, key_separator, acks, timeout)
    if fmt in (Format.json, Format.yaml):
        output.emit(res, fmt)
    output.info(f"{topic}: delivered {res.delivered}, failed {res.failed} in {res.seconds:.2f}s"
                f" ({res.records_per_second:.0f} records/s)")
    for e in res.errors:
        output.warn(e)
    if res.failed:
        raise typer.Exit(1)


def consume(
    topic: str = typer.Argument(..., help="Topic to read."),
    from_beginning: bool = typer.Option(False, "--from-beginning", help="Start at the earliest offset."),
    group: str | None = typer.Option(None, "--group", "-g", help="Consumer group; commits what was printed."),
    max_messages: int | None = typer.Option(None, "--max", help="Stop after N messages."),
    timeout: float | None = typer.Option(None, "--timeout", help="Stop after S seconds without messages."),
    print_key: bool = typer.Option(False, "--print-key", help="Print key<TAB>value."),
    partition: int | None = typer.Option(None, "--partition", help="Read only this partition."),
    offset: str | None = typer.Option(None, "--offset", help="With --partition: a number, earliest or latest."),
    user: str | None = UserOpt,
    bootstrap: str | None = BootstrapOpt,
    file: Path = SpecOpt,
    fmt: Format = typer.Option(Format.table, "--output", "-o", help="table (plain lines) or json (JSON lines)."),
) -> None:
    """Print one message per line (kafka-console-consumer.sh); Ctrl-C, --max or --timeout stop it."""
    from kctl.kafka import console

    if group:
        target, check = connect(file, bootstrap), None
    else:  # the consumer's own first Metadata answer is the identity check: one round trip less
        target, check = connect_by_metadata(file, bootstrap)
    mode = "json" if fmt is Format.json else "key" if print_key else "value"
    out = sys.stdout.buffer
    cc = console.ConsoleConsumer(target.as_user(user), topic, group, from_beginning, max_messages, timeout,
                                 partition, offset, check=check)
    try:
        with cc:
            for batch in cc.batches():
                out.write(console.render(batch, mode))
                out.flush()  # a block at a time, so a follower sees messages as they come
                cc.printed(batch)
    except KeyboardInterrupt:
        cc.result.stopped_by = "interrupt"
    r = cc.result
    committed = f"; committed {len(r.committed)} partition(s) for group {r.group}" if r.committed else ""
    output.info(f"consumed {r.consumed} message(s) in {r.seconds:.2f}s (stopped by {r.stopped_by or 'end'})"
                f"{committed}")


def register(app: typer.Typer) -> None:
    app.command("produce")(produce)
    app.command("consume")(consume)
