// RUN: sft-opt -p 'sft-low-precision{ops=1:bf16,3:f16}' %s | filecheck %s
// RUN: sft-opt -p 'sft-low-precision{ops=1:bf16,3:f16},sft-lower' %s | filecheck %s --check-prefix=LOWER
// RUN: not sft-opt -p 'sft-low-precision{ops=0:bf16}' %s 2>&1 | filecheck %s --check-prefix=ILLEGAL
// RUN: not sft-opt -p 'sft-low-precision{ops=1:f8}' %s 2>&1 | filecheck %s --check-prefix=TYPE
// sft-low-precision: each f32 input of a chosen contraction is rounded by an sft.map (arith.truncf)
// inserted right before it; the contraction reads the rounded inputs and still yields f32. Lowered,
// the matmul takes bf16 ins into f32 outs, and a generic contraction extends each input before
// the multiply.

// CHECK-LABEL: func.func @two
// CHECK: %[[XA:.*]] = "sft.map"(%arg0)
// CHECK: arith.truncf %{{.*}} : f32 to bf16
// CHECK: (tensor<8x64xf32>) -> tensor<8x64xbf16>
// CHECK: %[[WA:.*]] = "sft.map"(%arg1)
// CHECK: (tensor<64x128xf32>) -> tensor<64x128xbf16>
// CHECK: %[[MM:.*]] = "sft.contract"(%[[XA]], %[[WA]], %{{[0-9]+}})
// CHECK-SAME: (tensor<8x64xbf16>, tensor<64x128xbf16>, tensor<8x128xf32>) -> tensor<8x128xf32>
// CHECK: "sft.map"(%[[MM]])
// CHECK: arith.truncf %{{.*}} : f32 to f16
// CHECK: (tensor<8x128xf32>) -> tensor<8x128xf16>
// CHECK: "sft.map"(%arg2)
// CHECK: "sft.contract"
// CHECK-SAME: (tensor<8x128xf16>, tensor<32x128xf16>, tensor<8x32xf32>) -> tensor<8x32xf32>

// LOWER-LABEL: func.func @two
// LOWER: linalg.matmul {sft.op = 3 : i64} ins(%{{.*}}, %{{.*}} : tensor<8x64xbf16>, tensor<64x128xbf16>) outs(%{{.*}} : tensor<8x128xf32>)
// LOWER: linalg.generic
// LOWER: ^bb0(%[[A:.*]]: f16, %[[B:.*]]: f16, %[[C:.*]]: f32):
// LOWER-NEXT: %[[EA:.*]] = arith.extf %[[A]] : f16 to f32
// LOWER-NEXT: %[[EB:.*]] = arith.extf %[[B]] : f16 to f32
// LOWER-NEXT: %[[P:.*]] = arith.mulf %[[EA]], %[[EB]] : f32
// LOWER-NEXT: %[[S:.*]] = arith.addf %[[P]], %[[C]] : f32
// LOWER-NEXT: linalg.yield %[[S]] : f32
// LOWER: -> tensor<8x32xf32>

// ILLEGAL: error: plan computes op 0 from bf16 inputs, but it is not a contraction of f32 inputs into an f32 result
// TYPE: error: plan computes op 1 in 'f8', not a low-precision input type (known: bf16, f16)
func.func @two(%x: tensor<8x64xf32>, %w: tensor<64x128xf32>, %v: tensor<32x128xf32>) -> tensor<8x32xf32> {
  %zero = arith.constant 0.0 : f32
  %fill = "sft.map"() ({
    gpu.yield %zero : f32
  }) {maps = [], operandSegmentSizes = array<i32: 0, 0, 0, 0, 0, 0, 0, 0>} : () -> tensor<8x128xf32>
  %h = "sft.contract"(%x, %w, %fill) {domain = array<i64: 8, 128, 64>,
      maps = [affine_map<(m, n, k) -> (m, k)>, affine_map<(m, n, k) -> (k, n)>, affine_map<(m, n, k) -> (m, n)>]}
      : (tensor<8x64xf32>, tensor<64x128xf32>, tensor<8x128xf32>) -> tensor<8x128xf32>
  %fill2 = "sft.map"() ({
    gpu.yield %zero : f32
  }) {maps = [], operandSegmentSizes = array<i32: 0, 0, 0, 0, 0, 0, 0, 0>} : () -> tensor<8x32xf32>
  // h v^T: the second operand is contiguous along k, no named op: a linalg.generic
  %y = "sft.contract"(%h, %v, %fill2) {domain = array<i64: 8, 32, 128>,
      maps = [affine_map<(m, n, k) -> (m, k)>, affine_map<(m, n, k) -> (n, k)>, affine_map<(m, n, k) -> (m, n)>]}
      : (tensor<8x128xf32>, tensor<32x128xf32>, tensor<8x32xf32>) -> tensor<8x32xf32>
  return %y : tensor<8x32xf32>
}
