"""Every message true (issue 27): contradictions refused in one line, a missing mount said,
as real `gfd` processes on a simulated machine."""

from __future__ import annotations

import os
import subprocess
import sys

from helpers.process import ENV_PREFIXES


def gfd(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(ENV_PREFIXES)}
    return subprocess.run([sys.executable, "-m", "gfd", *args], capture_output=True, text=True,
                          timeout=60, check=False, env=base | (env or {}))


def errors(result: subprocess.CompletedProcess[str]) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.startswith("gfd: error: ")]


def test_use_node_feature_api_and_sink_file_contradict() -> None:
    """It picked the NodeFeature sink without a word."""
    for args, env in ((("--use-node-feature-api", "--sink", "file"), {}),
                      (("--sink", "node"), {"USE_NODE_FEATURE_API": "true"})):
        result = gfd("run", "--oneshot", "--simulate", "hgx-h100", *args, env=env)
        assert result.returncode == 2, result.stderr
        sink = args[-1]
        assert errors(result) == [
            f"gfd: error: --use-node-feature-api and --sink {sink} contradict each other "
            "(--use-node-feature-api means --sink nodefeature): give one of them"]


def test_an_explicit_sink_wins_over_gfds_default_node_feature_api(tmp_path) -> None:
    """gpu-feature-discovery defaults to the NodeFeature API; --sink file given wins."""
    out = tmp_path / "gfd"
    binary = os.path.join(os.path.dirname(sys.executable), "gpu-feature-discovery")
    base = {k: v for k, v in os.environ.items() if not k.startswith(ENV_PREFIXES)}
    result = subprocess.run([binary, "--oneshot", "--sink", "file", "--output-file", str(out),
                             "--simulate", "hgx-h100"], env=base | {"NODE_NAME": "n1"},
                            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    assert "nvidia.com/gpu.count=8" in out.read_text().splitlines()


def test_an_accelerator_label_with_the_compat_label_set_is_refused() -> None:
    """It was dropped without a word (compat writes exactly GFD's labels)."""
    result = gfd("labels", "--label-set", "compat", "--accelerator-label", "example.com/a",
                 "--simulate", "hgx-h100")
    assert result.returncode == 2 and result.stdout == ""
    assert errors(result) == [
        "gfd: error: --accelerator-label 'example.com/a' adds a label GFD does not write, and "
        "--label-set compat writes exactly GFD's labels: use --label-set extended, or drop "
        "--accelerator-label"]


def test_a_plugins_registry_that_does_not_exist_is_a_warning(tmp_path) -> None:
    """A missing mount quietly meant 'device plugin'."""
    missing = tmp_path / "nonexistent"
    result = gfd("labels", "--plugins-registry", str(missing), "--simulate", "hgx-h100")
    assert result.returncode == 0, result.stderr
    warned = [line for line in result.stderr.splitlines() if "WARNING" in line]
    assert len(warned) == 1 and warned[0].endswith(
        f"resource manager: --plugins-registry {missing} does not exist, so auto cannot see "
        "the DRA plugin and takes this node as device-plugin unless told otherwise (mount the "
        "kubelet's plugins_registry there read-only, or set --resource-manager)"), warned
    present = gfd("labels", "--plugins-registry", str(tmp_path), "--simulate", "hgx-h100")
    assert "WARNING" not in present.stderr


def test_snapshot_schema_errors_name_the_field_and_an_empty_object_is_refused(tmp_path) -> None:
    """`{"gpus":[{}]}` said `Gpu.__init__() missing 1 required keyword-only argument`; `{}`
    was labelled as a machine without GPUs (exit 0)."""
    cases = {
        '{"gpus":[{}]}': "snapshot.gpus[0]: missing field(s) 'index' (`gfd snapshot` writes "
                         "every field)",
        "{}": "snapshot: missing field(s) 'gpus' (`gfd snapshot` writes every field; a "
              'machine without GPUs has "gpus": [])',
    }
    for n, (text, message) in enumerate(cases.items()):
        path = tmp_path / f"snapshot-{n}.json"
        path.write_text(text)
        result = gfd("labels", "--snapshot", str(path))
        assert result.returncode == 1 and result.stdout == "", result.stderr
        assert errors(result) == [f"gfd: error: snapshot file {path}: {message}"]
        assert "__init__" not in result.stderr
    empty = tmp_path / "no-gpus.json"
    empty.write_text('{"gpus": []}')
    assert gfd("labels", "--snapshot", str(empty)).returncode == 0


def test_credentials_that_skip_tls_verification_are_one_warning_line(tmp_path) -> None:
    """urllib3 printed its two-line InsecureRequestWarning for each new connection."""
    import yaml
    from fakes.apiserver import FakeApiServer, self_signed

    with FakeApiServer(tls=self_signed(tmp_path)) as server:
        server.add_node("n1")
        kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig")
        cfg = yaml.safe_load(kubeconfig.read_text())
        cluster = cfg["clusters"][0]["cluster"]
        cluster.pop("certificate-authority")
        cluster["insecure-skip-tls-verify"] = True
        kubeconfig.write_text(yaml.safe_dump(cfg))
        result = gfd("run", "--oneshot", "--sink", "node", "--simulate", "hgx-h100",
                     env={"KUBECONFIG": str(kubeconfig), "NODE_NAME": "n1"})
        assert result.returncode == 0, result.stderr
        assert server.labels("n1")["nvidia.com/gpu.count"] == "8"
        assert server.count() >= 3  # several connections: the sink's, Events', ResourceSlices'
    assert "InsecureRequestWarning" not in result.stderr
    warned = [line for line in result.stderr.splitlines() if "TLS" in line]
    assert len(warned) == 1 and warned[0].endswith(
        f"WARNING gfd.kube: {kubeconfig} skips TLS verification (insecure-skip-tls-verify): gfd "
        "does not check the API server's certificate; give the cluster's certificate-authority "
        "instead"), result.stderr


def test_diff_against_standard_output_is_refused_not_shown_as_a_sink() -> None:
    """`diff -o -` printed every label as added and "+37 ~0 -0 at stdout"."""
    result = gfd("diff", "-o", "-", "--simulate", "hgx-h100")
    assert result.returncode == 2 and result.stdout == "", result.stderr
    assert errors(result) == [
        "gfd: error: -o - (standard output) holds no published labels to compare with: diff "
        "the feature file (-o PATH) or an API sink (--sink node|nodefeature); gfd labels "
        "prints what gfd would publish"]
    assert "at stdout" not in result.stderr
