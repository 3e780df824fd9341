// RUN: not sft-opt --sft-verify %s 2>&1 | filecheck %s
// sft-verify reports what IRDL cannot check, at the op's location.

func.func @wrong_map_count(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  // CHECK: verify.mlir:[[# @LINE + 1]]:8: error: 'sft.map' op has 0 maps, expected 1 (one per input)
  %0 = "sft.map"(%x) ({
  ^bb0(%a: f32):
    gpu.yield %a : f32
  }) {maps = [], operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0>} : (tensor<4x8xf32>) -> tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}
