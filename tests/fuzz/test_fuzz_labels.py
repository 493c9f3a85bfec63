"""Property tests: the sanitiser and naming rules, and compute_labels on arbitrary snapshots.

Promises: valid values, always -- every key and value is validated with the API server's
rules, long products are shortened keeping their suffixes with trailing ``-._`` trimmed, and
an invalid label is dropped alone; labelling is deterministic (the same input gives the same
labels); ``gpu.accelerator`` is a lowercase ``nvidia-`` slug and a ``gpu.product.<model>`` key
name part is at most 63 characters; the sanitiser and the labelling never crash and never
emit an invalid label.
"""

from __future__ import annotations

import re

from hypothesis import example, given
from hypothesis import strategies as st

from fuzz.checks import check_labelling
from fuzz.strategies import fuzz_settings, label_options, snapshots, texts
from gfd.facts.naming import MAX_VALUE, accelerator_slug, product_value, sanitise, short_name
from gfd.labelers.options import LabelOptions
from gfd.labelers.validate import value_problem
from gfd.snapshot import Snapshot

SANITISED = re.compile(r"[A-Za-z0-9\-_.]*")
LONG_MODELS = st.text(alphabet="NVIDAa019 -_.", min_size=40, max_size=120)
"""Model names long enough after sanitising to need shortening."""
SUFFIXES = st.lists(st.sampled_from(
    ["MIG", "1g.5gb", "1c.3g.20gb", "1g.10gb.me", "SHARED", "MIG-INVALID", ""]), max_size=3)


@fuzz_settings(200)
@given(texts)
@example("NVIDIA H100 80GB HBM3")
@example(" \t\u00a0\u2028NVIDIA\u3000A100 ")
@example("\uff2e\uff36\uff29\uff24\uff29\uff21 \uff28\uff11\uff10\uff10")  # full-width: not ASCII
def test_sanitise_never_crashes_and_keeps_only_allowed_characters(text: str) -> None:
    """GFD's sanitise: any text sanitises to [A-Za-z0-9-_.] only, idempotently."""
    out = sanitise(text)
    assert SANITISED.fullmatch(out), out
    assert sanitise(out) == out


@fuzz_settings(200)
@given(texts | LONG_MODELS, SUFFIXES)
@example("NVIDIA A100-SXM4-40GB" * 4, ["MIG", "1g.5gb"])
@example("A" * 62 + "-", ["SHARED"])
@example("...", ["MIG-INVALID"])
def test_product_value_fits_63_and_keeps_its_suffixes(model: str, suffixes: list[str]) -> None:
    """Product values never pass 63 characters; a shortened value keeps its
    suffixes whole and ends without '-._'; an unshortened one is GFD's exact join."""
    value, rules = product_value(model, *suffixes)
    assert all(isinstance(r, str) and r for r in rules)
    tail = "-".join(s for s in suffixes if s)
    joined = "-".join(p for p in (sanitise(model), *suffixes) if p)
    if len(joined) <= MAX_VALUE:
        assert value == joined, "GFD's value, unchanged, when it fits"
    else:
        assert len(value) <= MAX_VALUE, value
        head = value.removesuffix(tail).removesuffix("-") if tail else value
        assert value in (tail, f"{head}-{tail}" if tail else head), "suffixes kept whole"
        assert sanitise(model).startswith(head), "only the model part is cut"
        assert not head.endswith(("-", "_", ".")), "trailing '-._' trimmed"
        if head[:1].isalnum():
            assert value_problem(value) is None, value


@fuzz_settings(200)
@given(texts | LONG_MODELS)
@example("Tesla T4")
@example("NVIDIA H100 80GB HBM3")
@example("nvidia" * 30)
@example("x" * 200)
def test_accelerator_slug_is_a_valid_lowercase_nvidia_slug(model: str) -> None:
    """gpu.accelerator: lowercase, ``nvidia``-prefixed, at most 63 characters, and a
    valid label value whenever the model has any ASCII letter or digit."""
    slug = accelerator_slug(model)
    assert slug == slug.lower() and slug.startswith("nvidia") and len(slug) <= MAX_VALUE
    if any(c.isascii() and c.isalnum() for c in sanitise(model)):
        assert value_problem(slug) is None, slug


@fuzz_settings(200)
@given(texts, st.integers(min_value=10, max_value=100))
@example("a" * 64, 63)
@example("a" * 54 + "-" * 20, 63)
def test_short_name_fits_its_limit_and_is_stable(text: str, limit: int) -> None:
    """gpu.product.<model>: long models are shortened with a stable short hash -- the
    result fits the limit, is the text itself when it fits, and is the same every time."""
    out = short_name(text, limit)
    assert len(out) <= limit
    assert out == short_name(text, limit)
    if len(text) <= limit:
        assert out == text
    else:
        assert re.fullmatch(r".*-[0-9a-f]{8}", out, re.DOTALL), out


@fuzz_settings(200)
@given(snapshots, label_options)
def test_compute_labels_on_arbitrary_snapshots_never_crashes_nor_emits_an_invalid_label(
        snapshot: Snapshot, options: LabelOptions) -> None:
    """Arbitrary GPU names (any text), memory, compute capability,
    MIG profile names, fabric, vGPU and host strings, under every MIG strategy, label set and
    sharing config -- compute_labels never crashes (only the two documented refusals) and
    every published key and value passes the API server's rules."""
    check_labelling(snapshot, options)


@fuzz_settings(150)
@given(snapshots)
def test_compute_labels_with_default_options_never_emits_an_invalid_label(
        snapshot: Snapshot) -> None:
    """The same with the defaults `gfd run` starts with (no config file)."""
    check_labelling(snapshot, LabelOptions())
