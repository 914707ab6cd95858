"""What building the CLI imports: a command pays only for its own domain imports.

A guard, not a timing: the heavy modules must stay out of sys.modules until a
command that needs them runs. How to register a command: kctl/cli/main.py.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import kctl.cli

# Third-party packages and kctl domain packages that no command may import before it runs.
HEAVY = ("docker", "kazoo", "confluent_kafka", "pyspark", "delta", "pyarrow", "deltalake", "duckdb", "testcontainers",
         "jinja2", "yaml", "pydantic", "rich")
DOMAIN = ("kctl.model", "kctl.kraft", "kctl.cluster", "kctl.migrate", "kctl.runtime", "kctl.kafka", "kctl.zk",
          "kctl.stream", "kctl.agent")

CLI_DIR = Path(kctl.cli.__file__).parent


def loaded_after(code: str) -> list[str]:
    probe = code + "\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))\n"
    # From the checkout under test, so that the probe imports the same kctl as this test.
    p = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120,
                       cwd=CLI_DIR.parents[1])
    assert p.returncode == 0, p.stderr
    return list(json.loads(p.stdout.splitlines()[-1]))


def heavy_in(modules: list[str]) -> list[str]:
    return [m for m in modules
            if m.split(".")[0] in HEAVY or any(m == d or m.startswith(d + ".") for d in DOMAIN)]


def test_building_the_command_tree_imports_no_domain() -> None:
    modules = loaded_after("import typer\nimport kctl.cli.main as m\ntyper.main.get_command(m.app)")
    assert heavy_in(modules) == []
    # ...and the tree is really built: every command module was registered.
    shared = ("__init__", "main", "common", "coerce")
    assert {f"kctl.cli.{p.stem}" for p in CLI_DIR.glob("*.py") if p.stem not in shared} <= set(modules)


def test_help_imports_no_domain() -> None:
    # rich is allowed here: typer draws the help with it.
    code = ("import contextlib, io\nfrom kctl.cli.main import main\n"
            "with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n"
            "    main(['--help'])\n")
    assert [m for m in heavy_in(loaded_after(code)) if m.split(".")[0] != "rich"] == []


def test_every_command_module_registers_and_none_imports_main() -> None:
    from kctl.cli import main

    listed = {m.__name__ for m in main.COMMAND_MODULES}
    for path in sorted(CLI_DIR.glob("*.py")):
        if path.stem in ("__init__", "main"):
            continue
        tree = ast.parse(path.read_text())
        imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        assert "kctl.cli.main" not in imported, f"{path.name} imports kctl.cli.main: use kctl.cli.common"
        assert not any(isinstance(n, ast.ImportFrom) and n.module == "kctl.cli" and
                       any(a.name == "main" for a in n.names) for n in ast.walk(tree)), path.name
        if path.stem in ("common", "coerce"):  # shared by the commands, not commands
            continue
        assert f"kctl.cli.{path.stem}" in listed, f"{path.name} is not in kctl.cli.main.COMMAND_MODULES"
        assert any(isinstance(n, ast.FunctionDef) and n.name == "register" for n in tree.body), path.name


def test_a_call_converts_only_the_invoked_command() -> None:
    from typer.main import get_command_name

    from kctl.cli import main

    names = [c.name or get_command_name(c.callback.__name__) for c in main.app.registered_commands if c.callback]
    names += [g.name or g.typer_instance.info.name for g in main.app.registered_groups if g.typer_instance]
    assert len(names) == len(set(names)) and {"status", "up", "zk", "topic"} <= set(names)
    before = (list(main.app.registered_commands), list(main.app.registered_groups))
    for name in names:  # every command is still reachable, alone, and the full tree stays as it was
        only = main.invoked(["-v", name, "--some-flag"])
        assert len(only.registered_commands) + len(only.registered_groups) == 1, name
    assert (main.app.registered_commands, main.app.registered_groups) == before
    for args in ([], ["--help"], ["-h", "status"], ["nosuch"], ["--version"]):
        assert main.invoked(args) is main.app, args


def test_kafka_clients_do_not_import_asyncio_until_used() -> None:
    # confluent-kafka's package imports asyncio for helpers kctl never calls; kctl.kafka defers it.
    modules = loaded_after("import kctl.kafka.client, kctl.kafka.console, kctl.kafka.topics\n"
                           "from confluent_kafka import Consumer, Producer, TopicPartition\n"
                           "from confluent_kafka.admin import AdminClient\n"
                           "import confluent_kafka._serde_builder as sb\nimport sys\n"
                           "assert type(sys.modules['asyncio']).__name__ == '_Deferred'\n")
    assert "confluent_kafka.admin" in modules
    assert [m for m in modules if m.startswith("asyncio.")] == []


def test_a_deferred_asyncio_works_when_used() -> None:
    modules = loaded_after("import kctl.kafka\nimport asyncio\nfrom asyncio import Queue\nimport asyncio.subprocess\n"
                           "assert asyncio.run(asyncio.sleep(0, 'ok')) == 'ok'\n"
                           "import confluent_kafka._serde_builder as sb\nassert sb.asyncio.shield is asyncio.shield\n"
                           "import sys\nassert type(sys.modules['asyncio']).__name__ == 'module'\n")
    assert "asyncio.events" in modules


def test_plain_messages_to_stderr_need_no_rich() -> None:
    code = ("import contextlib, io\nfrom kctl import output\nerr = io.StringIO()\n"
            "with contextlib.redirect_stderr(err):\n"
            "    output.info('T: delivered 5, failed 0 in 0.10s (50 records/s)')\n"
            "    output.warn('host 127.0.0.1:19092 is slow')\n"
            "assert err.getvalue() == ('T: delivered 5, failed 0 in 0.10s (50 records/s)\\n'\n"
            "                          'warning: host 127.0.0.1:19092 is slow\\n'), err.getvalue()\n")
    assert [m for m in loaded_after(code) if m.split(".")[0] == "rich"] == []


def test_messages_with_markup_still_go_through_rich(capsys: object) -> None:
    from kctl import output

    output.info("[bold]done[/bold] :)")
    output.warn("see [b]this[/b]")
    err = capsys.readouterr().err  # type: ignore[attr-defined]
    assert err == "done :)\nwarning: see this\n"


def test_tables_print_emoji_codes_as_data(capsys: object) -> None:
    from kctl import output

    output.emit([{"topic": ":fire:", "partitions": 3}], "table")
    assert ":fire:" in capsys.readouterr().out  # type: ignore[attr-defined]


def test_the_spec_does_not_import_package_metadata_until_used() -> None:
    # pydantic takes importlib.metadata.entry_points at import time; with plugins disabled it never calls it.
    modules = loaded_after("import os\nos.environ['PYDANTIC_DISABLE_PLUGINS'] = '__all__'\n"
                           "from kctl.model.spec import ClusterSpec\nClusterSpec()\n")
    assert "pydantic.main" in modules and "importlib.metadata._adapters" not in modules


def test_deferred_package_metadata_works_when_used() -> None:
    modules = loaded_after("import kctl.model.spec\nimport importlib.metadata\n"
                           "from importlib.metadata import entry_points, version\n"
                           "assert version('pydantic') == importlib.metadata.version('pydantic')\n"
                           "assert isinstance(entry_points(group='console_scripts'), importlib.metadata.EntryPoints)\n"
                           "import sys\nassert sys.modules['importlib.metadata'].PathDistribution\n")
    assert "importlib.metadata._adapters" in modules


def test_the_status_path_loads_no_renderer_no_docker_sdk_no_event_loop() -> None:
    """`kctl status` imports the spec, the engines and the health checks; what it never uses stays unloaded
    (stand-ins from kctl.deferred until first use): the template engine, the Docker SDK (the status path asks
    the engine over its own client, docker_api.sdk() loading the SDK when it first calls), asyncio, urllib's
    HTTP client, the engines the cluster does not run on (Swarm's; the hosts' with ssh, bundles and the
    image builder), the renderer, and `kctl up`'s log tails and root-znode check."""
    modules = loaded_after("import sys\nimport kctl.cli.cluster, kctl.cluster.health, kctl.kafka.describe\n"
                           "for m in [m for m, v in sys.modules.items() if type(v).__name__ == '_Deferred']:\n"
                           "    del sys.modules[m]\n")
    loaded = {m.split(".")[0] for m in modules} | set(modules)
    assert {"kctl.cluster.health", "kctl.model.spec", "kctl.kafka.describe"} <= set(modules)
    assert not loaded & {"jinja2", "docker", "requests", "urllib3", "asyncio", "urllib.request", "http.client",
                         "confluent_kafka", "kazoo", "cryptography", "kctl.runtime.engine.hosts",
                         "kctl.runtime.engine.swarm", "kctl.runtime.engine.ssh", "kctl.runtime.engine.bundle",
                         "kctl.runtime.image.build", "kctl.model.render", "kctl.runtime.cluster", "kctl.zk.znodes"}


def test_a_deferred_engine_loads_when_picked_and_a_patch_through_it_reaches_its_code() -> None:
    code = ("import sys\nfrom kctl.model.spec import Engine\nfrom kctl.runtime.engine import engines\n"
            "from kctl.runtime.engine import hosts\n"
            "assert type(sys.modules['kctl.runtime.engine.hosts']).__name__ == '_Deferred'\n"
            "cls = engines.implementation(Engine.hosts)\n"
            "real = sys.modules['kctl.runtime.engine.hosts']\n"
            "assert cls is real.HostsEngine and type(real).__name__ == 'module'\n"
            "hosts.PATCHED = 1\nassert real.PATCHED == 1\ndel hosts.PATCHED\nassert not hasattr(real, 'PATCHED')\n")
    assert "kctl.runtime.engine.hosts" in loaded_after(code)


def test_pytests_monkeypatch_through_a_loaded_stand_in_restores_the_real_module() -> None:
    """pytest's monkeypatch reads the target's ``__dict__`` to know what to put back: through a stand-in whose
    module is loaded that is the real module's, so its undo restores the name instead of deleting it there
    (tests that patch kctl.runtime.engine.engines through kctl.cluster.identity's stand-in lost for_spec)."""
    code = ("import sys, pytest\nfrom kctl.deferred import defer_import\n"
            "defer_import('kctl.runtime.engine.hosts')\nfrom kctl.runtime.engine import hosts\n"
            "assert type(hosts).__name__ == '_Deferred'\nreal_fn = hosts.HostsEngine\n"
            "real = sys.modules['kctl.runtime.engine.hosts']\nassert real is not hosts\n"
            "mp = pytest.MonkeyPatch()\nmp.setattr(hosts, 'HostsEngine', 'fake')\n"
            "assert real.HostsEngine == 'fake' and hosts.HostsEngine == 'fake'\nmp.undo()\n"
            "assert real.HostsEngine is real_fn and hosts.HostsEngine is real_fn\n")
    assert "kctl.runtime.engine.hosts" in loaded_after(code)
