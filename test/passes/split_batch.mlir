// RUN: sft-opt -p 'sft-split-batch{parts=2 args=1}' %s | filecheck %s
// RUN: not sft-opt -p 'sft-split-batch{parts=2 args=0}' %s 2>&1 | filecheck %s --check-prefix=WEIGHT
// sft-split-batch: the program for one of two halves of the batch. A linear layer on x
// [4, 3, 8] (batch 4, 3 tokens): the tokens merged with the batch (the batch outermost), the
// matmul with its zero init and the broadcast bias divided along the batch loop, the weight
// whole, the result split back into batch and tokens.

// CHECK-DAG: #[[MERGE:.*]] = affine_map<(d0, d1) -> (d0 floordiv 3, d0 mod 3, d1)>
// CHECK-DAG: #[[UNMERGE:.*]] = affine_map<(d0, d1, d2) -> (d0 * 3 + d1, d2)>
// CHECK-LABEL: func.func @linear
// CHECK-SAME: (%arg0: tensor<8x5xf32>, %arg1: tensor<2x3x8xf32>, %arg2: tensor<5xf32>) -> tensor<2x3x5xf32>
// CHECK: "sft.view"(%arg1) {map = #[[MERGE]]} : (tensor<2x3x8xf32>) -> tensor<6x8xf32>
// CHECK: () -> tensor<6x5xf32>
// CHECK: "sft.contract"{{.*}}domain = array<i64: 6, 5, 8>{{.*}} : (tensor<6x8xf32>, tensor<8x5xf32>, tensor<6x5xf32>) -> tensor<6x5xf32>
// CHECK: "sft.view"(%arg2) {{.*}} : (tensor<5xf32>) -> tensor<6x5xf32>
// CHECK: "sft.map"(%{{.*}}, %{{.*}}) ({
// CHECK: arith.addf
// CHECK: (tensor<6x5xf32>, tensor<6x5xf32>) -> tensor<6x5xf32>
// CHECK: "sft.view"{{.*}} {map = #[[UNMERGE]]} : (tensor<6x5xf32>) -> tensor<2x3x5xf32>
// CHECK: return {{.*}} : tensor<2x3x5xf32>
// WEIGHT: error: sft-split-batch cannot split this program's batch: an op reads its batch loop from a value that is not split (a batch-sized constant or parameter) (at {{.*}}split_batch.mlir:[[# @LINE + 8]]:9

func.func @linear(%w: tensor<8x5xf32>, %x: tensor<4x3x8xf32>, %b: tensor<5xf32>) -> tensor<4x3x5xf32> {
  %zero = arith.constant 0.0 : f32
  %rows = "sft.view"(%x) {map = affine_map<(d0, d1) -> (d0 floordiv 3, d0 mod 3, d1)>} : (tensor<4x3x8xf32>) -> tensor<12x8xf32>
  %init = "sft.map"() ({
    gpu.yield %zero : f32
  }) {maps = [], operandSegmentSizes = array<i32: 0, 0, 0, 0, 0, 0, 0, 0>} : () -> tensor<12x5xf32>
  %mm = "sft.contract"(%rows, %w, %init) {domain = array<i64: 12, 5, 8>,
      maps = [affine_map<(m, n, k) -> (m, k)>, affine_map<(m, n, k) -> (k, n)>, affine_map<(m, n, k) -> (m, n)>]}
      : (tensor<12x8xf32>, tensor<8x5xf32>, tensor<12x5xf32>) -> tensor<12x5xf32>
  %bias = "sft.view"(%b) {map = affine_map<(d0, d1) -> (d1)>} : (tensor<5xf32>) -> tensor<12x5xf32>
  %sum = "sft.map"(%mm, %bias) ({
  ^bb0(%p: f32, %q: f32):
    %s = arith.addf %p, %q : f32
    gpu.yield %s : f32
  }) {maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>],
      operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0>} : (tensor<12x5xf32>, tensor<12x5xf32>) -> tensor<12x5xf32>
  %out = "sft.view"(%sum) {map = affine_map<(d0, d1, d2) -> (d0 * 3 + d1, d2)>} : (tensor<12x5xf32>) -> tensor<4x3x5xf32>
  return %out : tensor<4x3x5xf32>
}
