"""The per-op constraints of the GPU delegates that are too rich to be data.

Each check takes an OpSignature (and the parameters its YAML entry gives) and returns the
reason the delegate refuses the op, or None. Messages quote the delegate's own wording where
it has one; the citations are to google-ai-edge/LiteRT@f67457790c9c, as summarized in
shared/research/gpu_delegate_rules.md. Target packs name these checks under `checks:` (refusal
at partition time: the op runs on the CPU) or `init_checks:` (accepted at partition time, fails
when the delegate initializes), and a backend's under its own `init_checks:`/`graph_checks:`.

One module per delegate source the checks read, one registry for all:
registry.py: `@check` / `@graph_check` and `run`
compat.py: the classic delegate's compatibility checks on operand counts, options, constants, broadcasts
compat_ops.py: the classic delegate's compatibility checks of one op family
builder.py: what the classic delegate's builder refuses when it builds the graph (init failures)
litert.py: LiteRT's GPU accelerator (ML Drift) parsers' IsSupported
composite.py: the accelerator and STABLEHLO_COMPOSITE (odml.* ops taken whole, and its death on them)
gl.py: the OpenGL ES backend's kernels, per op and over the delegated partition
fusion.py: graph outputs the runtimes' fusion passes lose (GL's init failure; rules GPU810-811)
apple.py: the Core ML and Metal delegates
mediapipe.py: MediaPipe's custom GPU ops once the delegate took them (its V2-to-V1 transformations, kernels)

Importing this package registers every check.
"""

from gpulint.rules.checks import (  # noqa: F401  (registers their checks)
    apple,
    builder,
    compat,
    compat_ops,
    composite,
    fusion,
    gl,
    litert,
    mediapipe,
)
from gpulint.rules.checks.registry import CHECKS, GRAPH_CHECKS, Check, GraphCheck, check, graph_check, run

__all__ = ["CHECKS", "GRAPH_CHECKS", "Check", "GraphCheck", "check", "graph_check", "run"]
