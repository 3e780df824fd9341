// RUN: sft-opt -p 'sft-expand-batch{ops=3}' %s | filecheck %s
// RUN: not sft-opt -p 'sft-expand-batch{ops=2}' %s 2>&1 | filecheck %s --check-prefix=ILLEGAL
// sft-expand-batch: a batched matmul over heads merged into the batch ([2, 4] -> 8) runs over
// (2, 4) instead, reading the transposed heads without the reshape in between; the result's
// expand back to [2, 4, ...] disappears, the reshape of %k (not collapsed) becomes an expand.

// CHECK-LABEL: func.func @attention_scores
// CHECK: %[[QT:.*]] = "sft.view"(%arg0) {{.*}} (tensor<2x32x4x16xf32>) -> tensor<2x4x32x16xf32>
// CHECK-NOT: tensor<8x32x16xf32>
// CHECK: %[[K:.*]] = "sft.view"(%arg1) {{.*}} (tensor<8x16x32xf32>) -> tensor<2x4x16x32xf32>
// CHECK: %[[F:.*]] = "sft.map"()
// CHECK: () -> tensor<2x4x32x32xf32>
// CHECK: %[[S:.*]] = "sft.contract"(%[[QT]], %[[K]], %[[F]]) {domain = array<i64: 2, 4, 32, 32, 16>
// CHECK-SAME: -> tensor<2x4x32x32xf32>
// CHECK-NOT: sft.view
// CHECK: return %[[S]]
// ILLEGAL: error: plan expands the batch of op 2, which is not a contraction over a collapsed batch
func.func @attention_scores(%q: tensor<2x32x4x16xf32>, %k: tensor<8x16x32xf32>) -> tensor<2x4x32x32xf32> {
  %zero = arith.constant 0.0 : f32
  %qt = "sft.view"(%q) {map = affine_map<(d0, d1, d2, d3) -> (d0, d2, d1, d3)>} : (tensor<2x32x4x16xf32>) -> tensor<2x4x32x16xf32>
  %q8 = "sft.view"(%qt) {map = affine_map<(d0, d1, d2) -> (d0 floordiv 4, d0 mod 4, d1, d2)>} : (tensor<2x4x32x16xf32>) -> tensor<8x32x16xf32>
  %fill = "sft.map"() ({
    gpu.yield %zero : f32
  }) {maps = [], operandSegmentSizes = array<i32: 0, 0, 0, 0, 0, 0, 0, 0>} : () -> tensor<8x32x32xf32>
  %s = "sft.contract"(%q8, %k, %fill) {domain = array<i64: 8, 32, 32, 16>,
      maps = [affine_map<(b, m, n, k) -> (b, m, k)>, affine_map<(b, m, n, k) -> (b, k, n)>, affine_map<(b, m, n, k) -> (b, m, n)>]}
      : (tensor<8x32x16xf32>, tensor<8x16x32xf32>, tensor<8x32x32xf32>) -> tensor<8x32x32xf32>
  %s4 = "sft.view"(%s) {map = affine_map<(d0, d1, d2, d3) -> (d0 * 4 + d1, d2, d3)>} : (tensor<8x32x32xf32>) -> tensor<2x4x32x32xf32>
  return %s4 : tensor<2x4x32x32xf32>
}
