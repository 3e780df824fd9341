// RUN: sft-opt -p 'sft-hold-transposed{args=0}' %s | filecheck %s
// RUN: not sft-opt -p 'sft-hold-transposed{args=1}' %s 2>&1 | filecheck %s --check-prefix=ILLEGAL
// sft-hold-transposed: nn.Linear's weight [out, in], read by its contraction through a
// transpose, is taken as [in, out] instead: the argument's type transposed, the view gone, the
// contraction reading the argument itself (a matmul with B as [K, N]).

// CHECK-LABEL: func.func @linear(%arg0: tensor<256x1024xf32>, %arg1: tensor<32x256xf32>) -> tensor<32x1024xf32>
// CHECK-NOT: sft.view
// CHECK: "sft.contract"(%arg1, %arg0, %{{.*}})
// ILLEGAL: error: plan holds argument 1 transposed, which is not a matrix read only through transposes
func.func @linear(%w: tensor<1024x256xf32>, %x: tensor<32x256xf32>) -> tensor<32x1024xf32> {
  %zero = arith.constant 0.0 : f32
  %fill = "sft.map"() ({
    gpu.yield %zero : f32
  }) {maps = [], operandSegmentSizes = array<i32: 0, 0, 0, 0, 0, 0, 0, 0>} : () -> tensor<32x1024xf32>
  %wt = "sft.view"(%w) {map = affine_map<(d0, d1) -> (d1, d0)>} : (tensor<1024x256xf32>) -> tensor<256x1024xf32>
  %y = "sft.contract"(%x, %wt, %fill) {domain = array<i64: 32, 1024, 256>,
      maps = [affine_map<(m, n, k) -> (m, k)>, affine_map<(m, n, k) -> (k, n)>, affine_map<(m, n, k) -> (m, n)>]}
      : (tensor<32x256xf32>, tensor<256x1024xf32>, tensor<32x1024xf32>) -> tensor<32x1024xf32>
  return %y : tensor<32x1024xf32>
}
