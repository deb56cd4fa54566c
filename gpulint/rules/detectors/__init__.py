"""The rules code must decide: one function per rule code, registered by scope.

registry.py: the `@detector(code, scope)` registry, the scopes and the views detectors read
subgraph.py: op patterns over a subgraph (GPU402) and its partition plan (GPU601, GPU602)
op.py: one op at a time (GPU301, GPU401, GPU403, GPU503, GPU505)
f16.py: one op computed in half precision (GPU701, GPU702, GPU703)
model.py: the main subgraph's inputs (GPU302, GPU504) and the whole model (GPU110, GPU501, GPU502)
defects.py: known defects of a named runtime, per op or subgraph (GPU801-GPU805)

Importing this package registers every detector.
"""

from gpulint.rules.detectors import f16, model, op, subgraph  # noqa: F401  (registers their detectors)
from gpulint.rules.detectors.registry import (
    DETECTORS,
    MODEL_SCOPES,
    SUBGRAPH_SCOPES,
    Detector,
    Hit,
    ModelView,
    SubgraphView,
    in_scope,
)

# isort: split
# Registered last, so the findings of the rules above keep their order.
from gpulint.rules.detectors import defects  # noqa: F401  (registers the GPU8xx detectors)

__all__ = ["DETECTORS", "MODEL_SCOPES", "SUBGRAPH_SCOPES", "Detector", "Hit", "ModelView", "SubgraphView", "in_scope"]
