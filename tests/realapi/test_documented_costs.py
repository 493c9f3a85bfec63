"""What the README says a start costs at the API server, derived from kube-apiserver's audit
log: `gfd run` with its defaults (the watch, Events, ``--resource-manager auto``) as the
ServiceAccount with the RBAC of manifests/overlays/<sink>, every request of its start
counted by verb and resource and compared with the README's table, row by row."""

from __future__ import annotations

import re
import subprocess
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from e2e.test_run_api import NODE, NS, command
from fakes import profiles
from fakes.apiserver import FakeApiServer
from helpers.paths import ROOT
from helpers.process import free_port, http, wait_for
from helpers.realserver import AuditedRequest, gfd_node_server

BEGIN, END = "<!-- start-cost:begin -->", "<!-- start-cost:end -->"
SINKS = {"node": "Node sink", "nodefeature": "NodeFeature sink"}


@pytest.fixture
def server(request: pytest.FixtureRequest) -> Iterator[FakeApiServer]:
    with gfd_node_server(request, NODE, NS, {"team": "ml"}) as srv:
        yield srv


def documented() -> dict[str, dict[str, int]]:
    """The README's start-cost table: sink -> ``verb resource`` -> requests."""
    text = (ROOT / "README.md").read_text()
    table = text[text.index(BEGIN) + len(BEGIN):text.index(END)]
    rows = [[cell.strip() for cell in line.strip().strip("|").split("|")]
            for line in table.strip().splitlines() if line.startswith("| `")]
    header = [cell.strip() for cell in table.strip().splitlines()[0].strip().strip("|")
              .split("|")]
    out: dict[str, dict[str, int]] = {}
    for sink, title in SINKS.items():
        column = header.index(title)
        out[sink] = {row[0].strip("`"): int(row[column]) for row in rows
                     if row[column] not in ("0", "—", "")}
    sentence = (r"A start costs (\d+) requests per node with the Node sink and (\d+) with the "
                r"NodeFeature sink")
    total = re.search(sentence.replace(" ", r"\s+"), text)
    assert total, "the README's sentence giving the totals"
    assert sum(out["node"].values()) == int(total.group(1))
    assert sum(out["nodefeature"].values()) == int(total.group(2))
    return out


def kind(request: AuditedRequest) -> str:
    """``verb resource`` of an audited request (``watch nodes``, ``create events``)."""
    verb = request.verb
    parts = request.path.strip("/").split("/")
    # api/v1/nodes/<name>; apis/<group>/<version>[/namespaces/<ns>]/<resource>[/<name>]
    if "namespaces" in parts and parts.index("namespaces") + 2 < len(parts):
        resource = parts[parts.index("namespaces") + 2:]
    else:
        resource = parts[2:] if parts[0] == "api" else parts[3:]
    return f"{verb} {resource[0]}"


@pytest.mark.parametrize(("server", "sink"), [("real:node", "node"),
                                              ("real:nodefeature", "nodefeature")],
                         indirect=["server"])
def test_the_readme_states_what_a_start_costs_as_the_audit_log_shows(
        sink: str, tmp_path: Path, server: FakeApiServer, fake_nvml_lib: Path) -> None:
    profiles.hgx_h100().write(tmp_path / "profile.txt")
    port = free_port()
    argv, env = command(tmp_path, server, fake_nvml_lib, "run", "--sink", sink,
                        "--metrics-port", str(port))
    server.clear_log()
    log = (tmp_path / "agent.log").open("w")
    proc = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, text=True)
    try:
        wait_for(lambda: http(port, "/readyz")[0] == 200, timeout=60)
        wait_for(lambda: server.open_watches == 1, timeout=60)
        wait_for(lambda: server.count("POST", path_contains="/events") >= 1, timeout=60)
        seen = Counter(kind(r) for r in server.requests if isinstance(r, AuditedRequest))
    finally:
        proc.terminate()
        proc.wait(timeout=15)
        log.close()
    assert dict(seen) == documented()[sink], (tmp_path / "agent.log").read_text()[-3000:]
