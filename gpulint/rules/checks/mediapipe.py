"""MediaPipe's custom GPU ops in the classic delegate as MediaPipe builds it
(tflite/delegates/gpu/common/mediapipe/*.cc and their kernels): what fails once the delegate took
them. MediaPipe registers these ops at version 2. Its custom transformations (run by
BuildFinalModel / ApplyModelTransformations on every backend) turn a version-2 node into the
version-1 node both backends' kernels take: TransformTensorBilinearV2ToV1 always,
TransformLandmarksV2ToV1 only between two RESHAPEs, which it removes. Measured with the
GL delegate of the mediapipe wheel (tests/oracle): a version-2 op with those conditions met
initialises, as face_landmark_with_attention does.
"""

from __future__ import annotations

from typing import Any

from gpulint.rules.checks.registry import check
from gpulint.rules.signature import OpSignature, TensorSpec


def _options(sig: OpSignature) -> dict[str, Any]:
    """The custom op's flexbuffer map (custom_initial_data); empty when absent or unreadable."""
    data = sig.operator.custom_options
    if not data:
        return {}
    try:
        from flatbuffers import flexbuffers

        found = flexbuffers.Loads(bytes(data))
    except Exception:  # the parser reads no keys from bytes that are not a map: no attributes
        return {}
    return found if isinstance(found, dict) else {}


def _landmarks(sig: OpSignature) -> TensorSpec | None:
    """TransformLandmarksV2ToV1 takes input 1 as the landmarks unless it is the 1x1x4x4 matrix."""
    if len(sig.inputs) != 2:
        return None
    second = sig.inputs[1]
    return sig.inputs[0] if second.bhwc == (1, 1, 4, 4) else second


def _stays_version_2(sig: OpSignature) -> bool:
    """TransformLandmarksV2ToV1 skips the node (it stays version 2) unless a RESHAPE makes the
    landmarks and the output has exactly one reader, a RESHAPE."""
    if sig.version != 2:
        return False
    landmarks = _landmarks(sig)
    producer = sig.producer(landmarks) if landmarks is not None else None
    if producer is None or producer.op != "RESHAPE" or len(sig.outputs) != 1:
        return True
    readers = sig.consumers(sig.outputs[0])
    return len(readers) != 1 or readers[0].op != "RESHAPE"


@check
def mp_landmarks_producer(sig: OpSignature) -> str | None:
    """TransformLandmarksV2ToV1 reads graph->FindProducer(landmarks)->operation.type without a null
    check: landmarks that no op makes (a graph input) kill the process (SIGSEGV, measured on the
    GL delegate of the mediapipe wheel; the OpenCL backend runs the same transformation)."""
    landmarks = _landmarks(sig) if sig.version == 2 else None
    if landmarks is None or sig.producer(landmarks) is not None:
        return None
    return _dies(landmarks)


def _scalar_mul(sig: OpSignature | None) -> TensorSpec | None:
    """The runtime input of a MUL by a one-element constant (ElementwiseAttributes holds a float)."""
    if sig is None or sig.op != "MUL" or len(sig.runtime_inputs) != 1:
        return None
    return sig.runtime_inputs[0] if any(t.is_const and t.elements == 1 for t in sig.inputs) else None


@check
def mp_matrix_producer(sig: OpSignature) -> str | None:
    """LandmarksToTransformMatrixV2ToV2WithMul reads the producer of the landmarks and, where that
    is a MUL by a scalar, the producer of the MUL's input, each without a null check: either one
    missing (a graph input) kills the process (SIGSEGV, measured on the GL delegate)."""
    x = sig.input(0) if sig.version == 2 else None
    if x is None:
        return None
    mul = sig.producer(x)
    if mul is None:
        return _dies(x)
    scaled = _scalar_mul(mul)
    if scaled is not None and mul.producer(scaled) is None:
        return _dies(scaled)
    return None


@check
def gl_landmarks_to_matrix(sig: OpSignature) -> str | None:
    """gl/kernels/mediapipe/landmarks_to_transform_matrix.cc, version 2: IsSupported takes one input
    of BHWC (b, 1, 1, 3n). MediaPipe's CPU op wants [1, n, 3] landmarks, so only
    LandmarksToTransformMatrixV2ToV2WithMul gets there: it removes a RESHAPE -> MUL-by-scalar chain
    before the op, and the kernel reads the RESHAPE's input (oracle: [1, 3n] -> RESHAPE -> MUL ->
    op initialises; without the RESHAPE or the MUL it fails)."""
    x = sig.input(0) if sig.version == 2 else None
    if x is None:
        return None
    mul = sig.producer(x)
    scaled = _scalar_mul(mul)
    reshape = mul.producer(scaled) if mul is not None and scaled is not None else None
    if reshape is not None and reshape.op == "RESHAPE" and reshape.input(0) is not None:
        x = reshape.inputs[0]
    shape = x.bhwc
    if len(shape) == 4 and shape[1:3] == (1, 1) and shape[3] % 3 == 0:
        return None
    return "This case is not supported by LandmarksToTransformMatrixV2"


def _dies(t: TensorSpec) -> str:
    return (
        f"no op makes `{t.name}` (a graph input), whose producer MediaPipe's V2-to-V1 transformation reads: "
        "the process dies (SIGSEGV)"
    )


@check
def cl_transform_landmarks(sig: OpSignature) -> str | None:
    """tasks/mediapipe/transform_landmarks.cc CreateTransformLandmarksFromNode: version 1 only."""
    return "Transform Landmarks operation supports only version 1." if _stays_version_2(sig) else None


@check
def gl_transform_landmarks(sig: OpSignature) -> str | None:
    """gl/kernels/mediapipe/transform_landmarks.cc IsSupported: version 1 and 2 or 3 dimensions
    (version 2 takes them from the output's channels, version 1 from its options)."""
    if sig.version == 2:
        dims = sig.outputs[0].shape[-1] if sig.outputs else None
    else:  # a version-1 node without the key keeps the attribute's default, which is not read here
        dims = _options(sig).get("dimensions", 2)
    if _stays_version_2(sig) or dims not in (2, 3):
        return "This case is not supported by TransformLandmarks"
    return None


@check
def gl_transform_tensor_bilinear(sig: OpSignature) -> str | None:
    """gl/kernels/mediapipe/transform_tensor_bilinear.cc IsSupported: a 1x1x4x4 matrix and an
    output size from the options (version 2: output_height/output_width, version 1: output_size),
    both positive. The version is 1 by then (TransformTensorBilinearV2ToV1)."""
    matrix = sig.input(1)
    opts = _options(sig)
    if sig.version == 2:
        size = (opts.get("output_height", 0), opts.get("output_width", 0))
    else:
        given = opts.get("output_size") or (0, 0)
        size = tuple(given[:2]) if isinstance(given, list | tuple) and len(given) >= 2 else (0, 0)
    sized = all(isinstance(v, int) and v > 0 for v in size)
    if matrix is None or matrix.bhwc != (1, 1, 4, 4) or not sized:
        return "This case is not supported by TransformTensorBilinear."
    return None
