// RUN: sft-opt -p 'sft-orient{ops=2}' %s | filecheck %s
// RUN: not sft-opt -p 'sft-orient{ops=1}' %s 2>&1 | filecheck %s --check-prefix=ILLEGAL
// sft-orient: a weight's gradient written [out, in] and transposed for an SGD update of a
// weight stored [in, out] is computed [in, out] instead: the loops relabelled (the result's
// first, the operand that walks its rows first), a fill of the new shape, no transpose left between the contraction and the update.

// CHECK-DAG: #[[$A:.*]] = affine_map<(d0, d1, d2) -> (d2, d0)>
// CHECK-DAG: #[[$B:.*]] = affine_map<(d0, d1, d2) -> (d1, d2)>
// CHECK-DAG: #[[$C:.*]] = affine_map<(d0, d1, d2) -> (d0, d1)>
// CHECK-LABEL: func.func @gradient_update
// CHECK: %[[GT:.*]] = "sft.view"(%arg0)
// CHECK: %[[F:.*]] = "sft.map"()
// CHECK: () -> tensor<256x1024xf32>
// CHECK: %[[G:.*]] = "sft.contract"(%arg1, %[[GT]], %[[F]]) {domain = array<i64: 256, 1024, 32>,
// CHECK-SAME: maps = [#[[$A]], #[[$B]], #[[$C]]]}
// CHECK-SAME: -> tensor<256x1024xf32>
// CHECK-NOT: sft.view
// CHECK: "sft.map"(%arg2, %[[G]])
// ILLEGAL: error: plan orients op 1, which is not a contraction read only through one transpose
func.func @gradient_update(%g: tensor<32x1024xf32>, %x: tensor<32x256xf32>, %w: tensor<256x1024xf32>) -> tensor<256x1024xf32> {
  %zero = arith.constant 0.0 : f32
  %lr = arith.constant 0.01 : f32
  %fill = "sft.map"() ({
    gpu.yield %zero : f32
  }) {maps = [], operandSegmentSizes = array<i32: 0, 0, 0, 0, 0, 0, 0, 0>} : () -> tensor<1024x256xf32>
  %gt = "sft.view"(%g) {map = affine_map<(d0, d1) -> (d1, d0)>} : (tensor<32x1024xf32>) -> tensor<1024x32xf32>
  %dwt = "sft.contract"(%gt, %x, %fill) {domain = array<i64: 1024, 256, 32>,
      maps = [affine_map<(m, n, k) -> (m, k)>, affine_map<(m, n, k) -> (k, n)>, affine_map<(m, n, k) -> (m, n)>]}
      : (tensor<1024x32xf32>, tensor<32x256xf32>, tensor<1024x256xf32>) -> tensor<1024x256xf32>
  %dw = "sft.view"(%dwt) {map = affine_map<(d0, d1) -> (d1, d0)>} : (tensor<1024x256xf32>) -> tensor<256x1024xf32>
  %new = "sft.map"(%w, %dw) ({
  ^bb0(%a: f32, %b: f32):
    %s = arith.mulf %b, %lr : f32
    %r = arith.subf %a, %s : f32
    gpu.yield %r : f32
  }) {maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>], operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0>} : (tensor<256x1024xf32>, tensor<256x1024xf32>) -> tensor<256x1024xf32>
  return %new : tensor<256x1024xf32>
}
