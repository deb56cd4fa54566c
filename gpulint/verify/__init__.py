"""`gpulint verify`: two comparisons on the same inputs, both always made and reported.

- rewrite: the candidate on the LiteRT CPU interpreter against the original on it (did the
  rewrite change the numbers?). With no --candidate the two are the same file and this one is
  identical by construction.
- executor: the candidate on the OpenCL executor (partitioned as the delegate would run it)
  against the candidate on the CPU interpreter (does the GPU path compute the same?).

Either can FAIL, so which one is to blame is a fact, not a guess. Both go through
`gpulint.compare`, whose tolerances come from the CPU's own noise: every CPU run is made twice,
on XNNPACK and on the interpreter's builtin kernels, and how far those two disagree, element by
element, scales the tolerance (see compare.py for the policies and the numbers behind them). A
NaN or Inf on one side where the other has a number FAILs, naming the first op that produced it.

A dynamic-range model (int8 weights beside float activations) runs on LiteRT's hybrid kernels,
which quantize each activation to int8 on the fly; the GPU delegate dequantizes the weights once
and computes in float. A full-int8 model runs on LiteRT's integer kernels, which requantize in
fixed point; the delegate computes its int8 ops in float too and rounds every int8 result to its
grid (add_quant_adjustments). Like is compared with like: the CPU side of both comparisons runs
the ops the delegate runs as it computes them (reference.float_twin for hybrid ops,
reference.fake_quant_twin for int8 ops), and the gap between LiteRT's own kernels and that
computation is reported per output, as information, never as the verdict.
"""

from gpulint.compare import Tolerance
from gpulint.verify.request import Request, VerifyError
from gpulint.verify.result import VerifyResult
from gpulint.verify.run import verify

__all__ = ["Request", "Tolerance", "VerifyError", "VerifyResult", "verify"]
