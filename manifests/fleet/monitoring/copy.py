"""Rewrite prometheusrule.yaml and dashboard.yaml here from charts/gfd/files/fleet-* (the
one copy): python3 manifests/fleet/monitoring/copy.py"""

import json
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
FILES = HERE.parents[2] / "charts" / "gfd" / "files"
META = {"namespace": "gfd", "labels": {"app.kubernetes.io/name": "gfd-fleet"}}


def main() -> None:
    note = "# Generated from charts/gfd/files/{}: edit that file, then run copy.py here.\n"
    rules = yaml.safe_load((FILES / "fleet-prometheus-rules.yaml").read_text())
    (HERE / "prometheusrule.yaml").write_text(note.format("fleet-prometheus-rules.yaml") +
        yaml.safe_dump({"apiVersion": "monitoring.coreos.com/v1", "kind": "PrometheusRule",
                        "metadata": {"name": "gfd-fleet", **META}, "spec": rules},
                       sort_keys=False, width=100))
    board = json.loads((FILES / "fleet-grafana-dashboard.json").read_text())
    labels = {**META["labels"], "grafana_dashboard": "1"}
    (HERE / "dashboard.yaml").write_text(note.format("fleet-grafana-dashboard.json") +
        yaml.safe_dump({"apiVersion": "v1", "kind": "ConfigMap",
                        "metadata": {"name": "gfd-fleet-dashboard", "namespace": "gfd",
                                     "labels": labels},
                        "data": {"gfd-fleet.json": json.dumps(board, indent=2)}},
                       sort_keys=False, width=100))


if __name__ == "__main__":
    main()
