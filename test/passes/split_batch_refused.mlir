// RUN: not sft-opt -p 'sft-split-batch{parts=2 args=1}' %s 2>&1 | filecheck %s
// RUN: not sft-opt -p 'sft-split-batch{parts=3 args=1}' %s 2>&1 | filecheck %s --check-prefix=PARTS
// sft-split-batch refuses a program whose rows depend on each other, naming the op.
// CHECK: error: sft-split-batch cannot split this program's batch: an op reduces over the batch other than by a sum from zero (a max across it, a sum onto a value) (at {{.*}}split_batch_refused.mlir:[[# @LINE + 9]]:10
// PARTS: error: sft-split-batch cannot split this program's batch: the batched arguments' dim 0 ([4]) is not one batch that divides into 3 parts

// The max of x over its batch (a sum would be each part's, added up after: split_batch_sums.mlir).
func.func @batch_sum(%unused: tensor<2xf32>, %x: tensor<4x8xf32>) -> tensor<8xf32> {
  %zero = arith.constant 0.0 : f32
  %init = "sft.map"() ({
    gpu.yield %zero : f32
  }) {maps = [], operandSegmentSizes = array<i32: 0, 0, 0, 0, 0, 0, 0, 0>} : () -> tensor<8xf32>
  %sum = "sft.reduce"(%x, %init) ({
  ^bb0(%v: f32):
    gpu.yield %v : f32
  }) {domain = array<i64: 8, 4>, kind = "max",
      maps = [affine_map<(d0, d1) -> (d1, d0)>, affine_map<(d0, d1) -> (d0)>],
      operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0, 1>}
      : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<8xf32>
  return %sum : tensor<8xf32>
}
