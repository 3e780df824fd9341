"""Cases IREE alone (torch-mlir's import + iree-compile with sft's host flags + iree.runtime)
gets wrong or fails: case id -> a part of IREE's (or torch-mlir's) own error, or of the
difference from eager, that the test must find in IREE alone's failure. sft is not judged on
these; the test checks that IREE alone still fails each of them this way, so that the list
stays true. "crashed": torch-mlir segfaults; the test imports that case in a process of its own.

Regenerate the evidence with `SFT_CONFORMANCE_AUDIT=1 pytest test/python/conformance`, which
runs IREE alone on every case and fails those it gets wrong that are not listed here.
"""

KNOWN_IREE_FAILURES: dict[str, str] = {
    # torch-mlir cannot lower the op to linalg
    "binary-hypot-f32": "torch.aten.hypot",
    "bitwise-lshift-i32": "torch.aten.__lshift__.Tensor",
    "cummax": "torch.aten.cummax",
    "sort-stable-i64": "torch.aten.sort.stable",
    "cumsum-0d": "failed to legalize operation 'torch.aten.cumsum'",
    "idiv-div-floor-i8": "dstOriginalDtype has to be passed to convertScalarToDtype",
    "clamp-i8-float-bounds": "'arith.cmpf' op operand #0 must be floating-point-like",
    "promote-i64-pow-int": "unimplemented: non-floating point dtype",  # integer ** int
    "promote-int-pow-tensor": "unimplemented: non-floating point dtype",  # int ** integer tensor
    # a constant argument left unconverted: fmod by a Python int, reductions of a 0-d tensor
    "idiv-fmod-scalar-i64": "failed to legalize operation 'torch.constant.int'",
    "idiv-fmod-scalar-f32": "failed to legalize operation 'torch.constant.int'",
    "reduce0d-amax-0": "failed to legalize operation 'torch.constant.int'",
    "reduce0d-argmax": "failed to legalize operation 'torch.constant.bool'",
    "reduce0d-logsumexp": "failed to legalize operation 'torch.constant.bool'",
    # torch-mlir segfaults while lowering (int8 * Python int; uint8 // Python int)
    "promote-i8-times-int": "crashed",
    "u8-floordiv": "crashed",
    # iree-compile fails: f64 math without an f64 implementation on llvm-cpu
    "unary-sin-f64": "undefined symbol: sin",
    "unary-cos-f64": "undefined symbol: cos",
    "unary-atan-f64": "undefined symbol: atan",
    "act-tanh-f64": "undefined symbol: tanh",
    "act-gelu-f64": "failed to legalize operation 'math.erf'",
    "binary-atan2-f64": "undefined symbol: atan2",
    "act-gelu-tanh-f64": "undefined symbol: tanh",
    "unary-erf-f64": "failed to legalize operation 'math.erf'",
    # iree-compile fails: F.pad with a negative amount (a crop) becomes a negative tensor.pad
    "pad-constant-negative": "expected offsets to be non-negative",
    # wrong values
    "binary-maximum-nan-f32": "values differ",  # torch.maximum propagates NaN; IREE alone does not
    "act-gelu-tanh-f32": "values differ",  # torch-mlir's sqrt(2/pi) is 0.797724 (5e-5 off)
    "act-gelu-tanh-module": "values differ",  # the same, through nn.GELU("tanh")
    "u8-sum": "values differ",  # uint8 widened as signed (200 read as -56)
    "u8-mul-float": "values differ",  # uint8 converted to float as signed
}

# Cases IREE alone fails that sft gets right: sft is judged on these like on any other case.
FIXED_BY_SFT: set[str] = {
    # f64 math lowered by sft (passes/f64_math.py)
    "unary-sin-f64", "unary-cos-f64", "unary-atan-f64", "binary-atan2-f64", "act-tanh-f64",
    "act-gelu-tanh-f64", "act-gelu-f64", "unary-erf-f64",
}
