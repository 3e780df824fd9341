// RUN: sft-opt -p 'sft-im2col{ops=1}' %s | filecheck %s
// RUN: not sft-opt -p 'sft-im2col{ops=0}' %s 2>&1 | filecheck %s --check-prefix=ILLEGAL
// sft-im2col: a filter gradient (torch's form: the activation [c, n, h, w] slides under the
// output gradient [f, n, oh, ow] as a 5x5 "filter"; the result [c, f, 3, 3] is the forward
// filter's shape) becomes a copy of the activation's patches laid out [summed loops, the
// result's loops], a plain matmul [f, n*oh*ow] x [n*oh*ow, c*kh*kw], and views back to
// [c, f, kh, kw].

// CHECK-DAG: #[[$PATCH:.*]] = affine_map<(d0, d1, d2, d3, d4, d5) -> (d3, d0, d1 + d4, d2 + d5)>
// CHECK-DAG: #[[$BACK:.*]] = affine_map<(d0, d1, d2, d3) -> (d1, d0, d2, d3)>
// CHECK-LABEL: func.func @filter_gradient
// CHECK: %[[P:.*]] = "sft.map"(%arg0)
// CHECK: maps = [#[[$PATCH]]]
// CHECK-SAME: -> tensor<2x5x5x2x3x3xf32>
// CHECK: %[[A:.*]] = "sft.view"(%arg1) {{.*}} -> tensor<4x50xf32>
// CHECK: %[[B:.*]] = "sft.view"(%[[P]]) {{.*}} -> tensor<50x18xf32>
// CHECK: %[[M:.*]] = "sft.contract"(%[[A]], %[[B]], %{{.*}}) {domain = array<i64: 4, 18, 50>
// CHECK: %[[E:.*]] = "sft.view"(%[[M]]) {{.*}} -> tensor<4x2x3x3xf32>
// CHECK: %[[R:.*]] = "sft.view"(%[[E]]) {map = #[[$BACK]]} {{.*}} -> tensor<2x4x3x3xf32>
// CHECK: return %[[R]]
// ILLEGAL: error: plan rewrites op 0 as a patch copy and a matmul, but it is not a convolution with a fill as init

func.func @filter_gradient(%x: tensor<2x2x7x7xf32>, %dy: tensor<4x2x5x5xf32>) -> tensor<2x4x3x3xf32> {
  %zero = arith.constant 0.0 : f32
  %fill = "sft.map"() ({
    gpu.yield %zero : f32
  }) {maps = [], operandSegmentSizes = array<i32: 0, 0, 0, 0, 0, 0, 0, 0>} : () -> tensor<2x4x3x3xf32>
  %dw = "sft.contract"(%x, %dy, %fill) {domain = array<i64: 2, 4, 3, 3, 2, 5, 5>,
      maps = [affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, d4, d2 + d5, d3 + d6)>,
              affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d1, d4, d5, d6)>,
              affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, d1, d2, d3)>]}
      : (tensor<2x2x7x7xf32>, tensor<4x2x5x5xf32>, tensor<2x4x3x3xf32>) -> tensor<2x4x3x3xf32>
  return %dw : tensor<2x4x3x3xf32>
}
