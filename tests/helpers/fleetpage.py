"""What the page of ``gfd fleet --serve`` shows, read from a real browser's DOM, and what it
must show of a ``/fleet?nodes=true`` document (tests/e2e/test_fleet_page.py,
tests/realapi/test_fleet_page_live.py)."""

from __future__ import annotations

import json
import urllib.request
from typing import Any

from helpers.browser import Tab

SHOWN = """(() => {
  if (!document.body || !document.body.dataset.version) return null;
  const numbers = (el) => Object.fromEntries([...el.querySelectorAll("[data-field]")]
    .map((f) => [f.dataset.field, Number(f.textContent)]));
  return {
    version: document.body.dataset.version,
    generation: Number(document.body.dataset.generation),
    kinds: [...document.querySelectorAll("#kinds .kind")]
      .map((k) => ({key: k.dataset.kind, ...numbers(k)})),
    nodes: [...document.querySelectorAll("#nodes tbody tr")]
      .map((r) => ({node: r.dataset.node, key: r.dataset.kind, ...numbers(r)})),
    findings: [...document.querySelectorAll("#finding-table tbody tr")]
      .map((r) => [r.dataset.node, r.dataset.check]),
    status: document.getElementById("status").textContent,
  };
})()"""
"""What the page shows: its kinds' and nodes' numbers, its findings, its status."""


def key(row: dict[str, Any]) -> str:
    """The page's key of a kind (kindKey in fleet.html)."""
    memory = "" if row["memory"] is None else row["memory"]
    return "|".join(str(v) for v in (row["manager"], row["resource"], row["model"], memory,
                                      row["migProfile"], row["sharing"], row["replicas"]))


def expected(doc: dict[str, Any]) -> dict[str, Any]:
    """What the page must show of a /fleet?nodes=true document."""
    return {
        "version": doc["view"]["version"], "generation": doc["view"]["generation"],
        "kinds": [{"key": key(k), "total": k["total"], "allocated": k["allocated"],
                   "free": k["free"], "pending": k["pending"],
                   "unschedulable": k["unschedulable"]["total"], "nodes": k["nodes"]}
                  for k in doc["kinds"]],
        "nodes": sorted(({"node": r["node"], "key": key(r), "total": r["total"],
                          "allocated": r["allocated"], "free": r["free"],
                          "pending": r["pending"]} for r in doc["nodes"]),
                        key=lambda r: (r["node"], r["key"])),
        "findings": [[f["node"], f["check"]] for f in doc["findings"]],
        "status": "complete" if doc["complete"] else "incomplete",
    }


def shown(tab: Tab, *, generation: int = 0) -> dict[str, Any]:
    got = tab.wait_for(f"(() => {{ const s = {SHOWN}; "
                       f"return s && s.generation >= {generation} ? s : null; }})()")
    assert isinstance(got, dict)
    got["nodes"] = sorted(got["nodes"], key=lambda r: (r["node"], r["key"]))
    return got


def fleet_doc(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url + "fleet?nodes=true", timeout=60) as resp:
        return dict(json.load(resp))
