// RUN: sft-opt -p 'sft-split-reduction{ops=1}' %s | filecheck %s
// RUN: not sft-opt -p 'sft-split-reduction{ops=0}' %s 2>&1 | filecheck %s --check-prefix=ILLEGAL
// sft-split-reduction: a sum of [64, 4, 8] over its two outer dims, the 8 kept ones innermost,
// becomes a sum of the same memory read as [16, 128] (16 split rows of 16 x 8 columns, the
// original body in it, from zero), then a sum of those 128 partials read as [16, 8] into the
// original init (here 1.0, kept once).

// CHECK-LABEL: func.func @channels_last_sum
// CHECK: %[[ZERO:.*]] = arith.constant 0.000000e+00 : f32
// CHECK: %[[Z:.*]] = "sft.map"() ({
// CHECK-NEXT: gpu.yield %[[ZERO]]
// CHECK: -> tensor<128xf32>
// CHECK: %[[FLAT:.*]] = "sft.view"(%arg0) {{.*}} -> tensor<2048xf32>
// CHECK: %[[ROWS:.*]] = "sft.view"(%[[FLAT]]) {{.*}} -> tensor<16x128xf32>
// CHECK: %[[PART:.*]] = "sft.reduce"(%[[ROWS]], %[[Z]]) ({
// CHECK: arith.mulf
// CHECK: {domain = array<i64: 128, 16>, kind = "add"
// CHECK: %[[FOLD:.*]] = "sft.view"(%[[PART]]) {{.*}} -> tensor<16x8xf32>
// CHECK: %[[SUM:.*]] = "sft.reduce"(%[[FOLD]], %[[INIT:.*]]) ({
// CHECK-NEXT: ^bb0(%[[A:.*]]: f32):
// CHECK-NEXT: gpu.yield %[[A]]
// CHECK: {domain = array<i64: 8, 16>, kind = "add"
// CHECK: return %[[SUM]]
// ILLEGAL: error: plan splits op 0, but it is not a float sum over outer dims of a few innermost kept ones

func.func @channels_last_sum(%x: tensor<64x4x8xf32>) -> tensor<8xf32> {
  %one = arith.constant 1.0 : f32
  %init = "sft.map"() ({
    gpu.yield %one : f32
  }) {maps = [], operandSegmentSizes = array<i32: 0, 0, 0, 0, 0, 0, 0, 0>} : () -> tensor<8xf32>
  %sum = "sft.reduce"(%x, %init) ({
  ^bb0(%v: f32):
    %sq = arith.mulf %v, %v : f32
    gpu.yield %sq : f32
  }) {domain = array<i64: 8, 64, 4>, kind = "add",
      maps = [affine_map<(d0, d1, d2) -> (d1, d2, d0)>, affine_map<(d0, d1, d2) -> (d0)>],
      operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0, 1>}
      : (tensor<64x4x8xf32>, tensor<8xf32>) -> tensor<8xf32>
  return %sum : tensor<8xf32>
}

// A sum that reads one loop twice (a diagonal) and another not at all (summed 7 times over)
// is not a plain sum over outer dims, though its element counts would let it be reshaped.
// RUN: not sft-opt -p 'sft-split-reduction{ops=3}' %s 2>&1 | filecheck %s --check-prefix=DIAGONAL
// DIAGONAL: error: plan splits op 3, but it is not a float sum over outer dims of a few innermost kept ones
func.func @diagonal_sum(%x: tensor<128x16x16xf32>) -> tensor<16xf32> {
  %zero = arith.constant 0.0 : f32
  %init = "sft.map"() ({
    gpu.yield %zero : f32
  }) {maps = [], operandSegmentSizes = array<i32: 0, 0, 0, 0, 0, 0, 0, 0>} : () -> tensor<16xf32>
  %sum = "sft.reduce"(%x, %init) ({
  ^bb0(%v: f32):
    gpu.yield %v : f32
  }) {domain = array<i64: 16, 128, 7>, kind = "add",
      maps = [affine_map<(d0, d1, d2) -> (d1, d0, d0)>, affine_map<(d0, d1, d2) -> (d0)>],
      operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0, 1>}
      : (tensor<128x16x16xf32>, tensor<16xf32>) -> tensor<16xf32>
  return %sum : tensor<16xf32>
}
