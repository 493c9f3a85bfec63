"""The invariant every labelling must hold, shared by the property tests."""

from __future__ import annotations

from gfd.errors import ConfigError, DiscoveryError
from gfd.labelers.options import LabelOptions
from gfd.labelers.pipeline import compute_labels
from gfd.labelers.validate import key_problem, validate, value_problem
from gfd.snapshot import Snapshot


def check_labelling(snapshot: Snapshot, options: LabelOptions) -> None:
    """compute_labels gives only valid, sorted labels, drops each invalid one
    alone, and is deterministic; the only exceptions are its two documented refusals."""
    try:
        labelling = compute_labels(snapshot, options)
    except ConfigError as exc:  # documented refusal: MPS with MIG enabled (GFD's rule)
        assert options.sharing.strategy == "mps" and "MPS" in str(exc)
        assert len(str(exc).splitlines()) == 1
        return
    except DiscoveryError as exc:  # documented refusal: an unparseable driver version
        driver = snapshot.driver_version
        assert driver is not None and len(driver.split(".")) not in (2, 3), exc
        return
    labels = labelling.labels
    for k, v in labels.items():
        assert isinstance(k, str) and isinstance(v, str)
        assert key_problem(k) is None, (k, key_problem(k))
        assert value_problem(v) is None, (k, v, value_problem(v))
    assert list(labels) == sorted(labels), "published labels are sorted by key"
    for rejection in labelling.rejected:
        assert rejection.key not in labels
        assert rejection.key in labelling.explained, "dropped alone, still explained"
        assert len(rejection.message.splitlines()) == 1, repr(rejection.message)
    # one invalid label never blocks the others: everything valid that was computed is published
    computed = {k: lab.value for k, lab in labelling.explained.items()}
    good, _ = validate(computed)
    assert good == labels
    assert compute_labels(snapshot, options).labels == labels, "deterministic"
