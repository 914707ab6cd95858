"""`kctl zk WORD`: one four-letter word against one or every ZooKeeper server, parsed and explained."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kctl.errors import UsageError
from kctl.model.spec import ClusterSpec, NodeSpec
from kctl.zk import fourlw

# What each word is for, shown in `kctl zk --help` and in the docs.
DESCRIPTIONS: dict[str, str] = {
    "conf": "Serving configuration (dataDir, tickTime, server.N lines...).",
    "cons": "Every client connection/session with its counters.",
    "crst": "Reset the connection/session statistics of every connection.",
    "dirs": "Total size in bytes of snapshots and transaction logs.",
    "dump": "Outstanding sessions and ephemeral nodes (on the leader).",
    "envi": "The server's environment: versions, Java, OS, paths.",
    "isro": "'ro' if the server is in read-only mode, 'rw' otherwise.",
    "mntr": "Monitoring variables (zk_server_state, latencies, znode count...).",
    "ruok": "'imok' if the server is running (not that it is in a quorum).",
    "srst": "Reset the server statistics.",
    "srvr": "Version, latency, counters, mode (leader/follower/standalone), zxid, node count.",
    "stat": "srvr plus the list of connected clients.",
    "wchc": "Watches by session (can be expensive).",
    "wchp": "Watches by znode path (can be expensive).",
    "wchs": "Summary of the watches.",
}
assert set(DESCRIPTIONS) == set(fourlw.WORDS)


@dataclass
class WordResult:
    """The answer of one server to one word."""

    node: str
    address: str
    word: str
    ok: bool
    whitelisted: bool = True
    serving: bool = True
    fields: dict[str, Any] = field(default_factory=dict)
    text: str = ""
    error: str | None = None
    explanation: str | None = None


def explain(word: str, text: str, spec: ClusterSpec | None = None) -> str | None:
    """Say what the server's answer means when it is not the answer the operator asked for."""
    if fourlw.NOT_WHITELISTED in text:
        enabled = ", ".join(spec.zookeeper.four_letter_words) if spec else "?"
        return (f"{word!r} is not in this server's 4lw.commands.whitelist (kctl.yaml enables: {enabled}); "
                f"add {word!r} to zookeeper.four_letter_words in kctl.yaml (or use ['*']) and run `kctl up`")
    if fourlw.NOT_SERVING in text:
        return ("the server runs but is not serving requests: it has no quorum yet (leader election) "
                "or lost it; `kctl status` shows the ensemble")
    return None


def nodes_for(spec: ClusterSpec, ref: str) -> list[NodeSpec]:
    return list(spec.nodes) if ref == "all" else [spec.node(ref)]


def ask_one(spec: ClusterSpec, node: NodeSpec, word: str, timeout: float = 3.0) -> WordResult:
    port = spec.zk_host_port(node)
    host = spec.node_address(node)
    addr = f"{host}:{port}"
    try:
        ans = fourlw.ask(host, port, word, timeout=timeout)
    except fourlw.FourLetterError as exc:
        return WordResult(node.hostname, addr, word, ok=False, error=str(exc),
                          explanation="ZooKeeper is down on this node or its port is not published; see `kctl status`")
    res = WordResult(node.hostname, addr, word, ok=ans.whitelisted and ans.serving, whitelisted=ans.whitelisted,
                     serving=ans.serving, text=ans.text, explanation=explain(word, ans.text, spec))
    if res.ok and word in fourlw.PARSED:
        res.fields = fourlw.parse(word, ans.text)
    return res


def run(spec: ClusterSpec, word: str, node: str = "all", timeout: float = 3.0) -> list[WordResult]:
    """Send ``word`` to the selected server(s); never raises for a server that does not answer."""
    if word not in fourlw.WORDS:
        raise UsageError(f"{word!r} is not a ZooKeeper four-letter word kctl knows",
                         hint=f"one of: {', '.join(fourlw.WORDS)}")
    return [ask_one(spec, n, word, timeout) for n in nodes_for(spec, node)]
