"""The reference: the LiteRT CPU interpreter, run in a child process.

The interpreter is not hardened against malformed files (some crash it with SIGSEGV), so it
never runs in gpulint's own process: a child loads the model, feeds the inputs from an .npz,
and writes the outputs to another. A crash or a refusal comes back as ReferenceError.

Modules: interpreter.py (run a model in the child: outputs, every tensor, the CPU's noise;
limits and the child's errors), child.py (what the child runs), timing.py (warm invoke times,
for bench), inputs.py (seeded inputs, integer ranges the graph implies), twins.py (a model as
the GPU delegate computes it: hybrid weights dequantized, int8 ops in float and rounded).
"""

from gpulint.reference.child import BUILTIN_PROBE
from gpulint.reference.errors import ReferenceError
from gpulint.reference.inputs import IntRange, adapt_inputs, integer_inputs, integer_range, random_inputs
from gpulint.reference.interpreter import (
    Noisy,
    interpreter_message,
    run,
    run_all_tensors,
    run_all_tensors_with_noise,
    run_models,
    run_with_noise,
    time_limit,
)
from gpulint.reference.timing import WARM_S, time_invoke
from gpulint.reference.twins import fake_quant_twin, float_twin, hybrid_ops, int8_ops

__all__ = [
    "BUILTIN_PROBE",
    "WARM_S",
    "IntRange",
    "Noisy",
    "ReferenceError",
    "adapt_inputs",
    "fake_quant_twin",
    "float_twin",
    "hybrid_ops",
    "int8_ops",
    "integer_inputs",
    "integer_range",
    "interpreter_message",
    "random_inputs",
    "run",
    "run_all_tensors",
    "run_all_tensors_with_noise",
    "run_models",
    "run_with_noise",
    "time_invoke",
    "time_limit",
]
