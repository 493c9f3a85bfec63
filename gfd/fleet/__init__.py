"""``gfd fleet``: the cluster's GPUs counted as the scheduler counts them.

Reading and counting are apart: ``source`` reads (the API server through ``gfd.kube.lists``,
or a dump) and reduces each page to the plain values of ``model`` as it arrives; everything
else is pure: ``requests`` (a pod's request), ``kinds`` (what a unit is), ``pools`` (DRA
pools, allocations, counters, taints), ``placement`` (node selection, node state), ``count``
(per node and kind), ``fits`` (where a pod fits: the selector's one parsed value), ``cel``
(the CEL gfd writes, evaluated), ``checks`` (what disagrees) and ``report`` (the output).
"""
