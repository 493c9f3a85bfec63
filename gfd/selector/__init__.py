"""``gfd selector``: a workload's GPU constraints parsed once (``filters``) and written as
gfd-label placement with the resource to request (``labels``) or as a DRA claim (``claims``).

The contract: a pod placed by the output, requesting the resource it names, never lands where a
unit of that resource can break a constraint; where the labels cannot tell, the node is left out
(``labels.MISSED``) or the filter refused with the reason.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gfd.errors import ConfigError
from gfd.selector import claims, labels
from gfd.selector.filters import Filters, Options, parse

__all__ = ["Filters", "Options", "Output", "parse", "render"]


@dataclass(frozen=True, slots=True)
class Output:
    documents: list[dict[str, Any]]
    """YAML documents to print (one pod-spec fragment, or the claim template and a Pod)."""
    warnings: tuple[str, ...]
    """Lines for stderr."""


def render(options: Options, *, label_set: str = "extended", form: str = "auto",
           feature_gates: str = "", uuid: str = "") -> Output:
    """Parse the options and write the output the command prints."""
    f = parse(options)
    if not options.dra:
        if feature_gates or uuid:
            raise ConfigError("--feature-gates and --uuid go with --dra: no gfd label names a "
                              "GPU's UUID or the DRA driver's gates")
        return Output([labels.stanza(f, form=form, label_set=label_set)], f.warnings)
    if form != "auto":
        raise ConfigError("--form chooses the label form's stanza; --dra prints a claim "
                          "template and a Pod with node affinity: drop --form")
    gates = claims.parse_gates(feature_gates)
    return Output(claims.documents(f, label_set=label_set, gates=gates, uuid=uuid), f.warnings)
