// RUN: sft-opt -p 'sft-sum-lone-loops' %s | filecheck %s
// sft-sum-lone-loops: out[m] = sum_{s,t} a[s, m] b[t] becomes (sum_s a[s, m]) (sum_t b[t]): each
// input summed over the loop it alone reads (from zero), then a contraction of what is left.
// A scalar dot of x with a broadcast of y reads y through the view: x is summed over the two
// loops y never reads, then dotted with y itself.

// CHECK-LABEL: func.func @one_operand_sums
// CHECK: %[[A:.*]] = "sft.reduce"(%arg0, %{{.*}}) ({
// CHECK: {domain = array<i64: 2, 3>, kind = "add", maps = [#{{.*}}, #[[KEEP1:.*]]]
// CHECK-SAME: -> tensor<3xf32>
// CHECK: %[[B:.*]] = "sft.reduce"(%arg1, %{{.*}}) ({
// CHECK: {domain = array<i64: 5>, kind = "add"
// CHECK-SAME: -> tensor<f32>
// CHECK: %[[R:.*]] = "sft.contract"(%[[A]], %[[B]], %{{.*}}) {domain = array<i64: 3>
// CHECK-SAME: (tensor<3xf32>, tensor<f32>, tensor<3xf32>) -> tensor<3xf32>
// CHECK: return %[[R]]
func.func @one_operand_sums(%a: tensor<2x3xf32>, %b: tensor<5xf32>) -> tensor<3xf32> {
  %zero = arith.constant 0.0 : f32
  %fill = "sft.map"() ({
    gpu.yield %zero : f32
  }) {maps = [], operandSegmentSizes = array<i32: 0, 0, 0, 0, 0, 0, 0, 0>} : () -> tensor<3xf32>
  %r = "sft.contract"(%a, %b, %fill) {domain = array<i64: 2, 3, 5>,
      maps = [affine_map<(d0, d1, d2) -> (d0, d1)>, affine_map<(d0, d1, d2) -> (d2)>, affine_map<(d0, d1, d2) -> (d1)>]}
      : (tensor<2x3xf32>, tensor<5xf32>, tensor<3xf32>) -> tensor<3xf32>
  return %r : tensor<3xf32>
}

// CHECK-LABEL: func.func @dot_with_a_broadcast
// CHECK: %[[X:.*]] = "sft.reduce"(%arg0, %{{.*}}) ({
// CHECK: {domain = array<i64: 2, 1, 2>, kind = "add"
// CHECK-SAME: -> tensor<2xf32>
// CHECK: "sft.contract"(%[[X]], %arg1, %{{.*}}) {domain = array<i64: 2>
// CHECK-SAME: (tensor<2xf32>, tensor<2xf32>, tensor<f32>) -> tensor<f32>
func.func @dot_with_a_broadcast(%x: tensor<2x1x2xf32>, %y: tensor<2xf32>) -> tensor<f32> {
  %zero = arith.constant 0.0 : f32
  %yb = "sft.view"(%y) {map = affine_map<(d0, d1, d2) -> (d2)>} : (tensor<2xf32>) -> tensor<2x1x2xf32>
  %fill = "sft.map"() ({
    gpu.yield %zero : f32
  }) {maps = [], operandSegmentSizes = array<i32: 0, 0, 0, 0, 0, 0, 0, 0>} : () -> tensor<f32>
  %r = "sft.contract"(%x, %yb, %fill) {domain = array<i64: 2, 1, 2>,
      maps = [affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> ()>]}
      : (tensor<2x1x2xf32>, tensor<2x1x2xf32>, tensor<f32>) -> tensor<f32>
  return %r : tensor<f32>
}

// A matmul has no lone loop: left as it is.
// CHECK-LABEL: func.func @matmul
// CHECK-NOT: sft.reduce
// CHECK: "sft.contract"(%arg0, %arg1, %{{.*}}) {domain = array<i64: 4, 5, 3>
func.func @matmul(%a: tensor<4x3xf32>, %b: tensor<3x5xf32>) -> tensor<4x5xf32> {
  %zero = arith.constant 0.0 : f32
  %fill = "sft.map"() ({
    gpu.yield %zero : f32
  }) {maps = [], operandSegmentSizes = array<i32: 0, 0, 0, 0, 0, 0, 0, 0>} : () -> tensor<4x5xf32>
  %r = "sft.contract"(%a, %b, %fill) {domain = array<i64: 4, 5, 3>,
      maps = [affine_map<(m, n, k) -> (m, k)>, affine_map<(m, n, k) -> (k, n)>, affine_map<(m, n, k) -> (m, n)>]}
      : (tensor<4x3xf32>, tensor<3x5xf32>, tensor<4x5xf32>) -> tensor<4x5xf32>
  return %r : tensor<4x5xf32>
}
