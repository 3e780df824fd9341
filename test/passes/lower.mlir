// RUN: sft-opt --sft-lower %s | filecheck %s
// sft-lower gives back named linalg ops where a contraction or view matches one.

// CHECK-LABEL: func.func @lower
func.func @lower(%x: tensor<8x64xf32>, %w: tensor<128x64xf32>, %img: tensor<1x3x8x8xf32>) -> (tensor<8x128xf32>, tensor<4x2x128xf32>, tensor<1x3x10x10xf32>) {
  %zero = arith.constant 0.0 : f32
  // CHECK: %[[E:.*]] = tensor.empty() : tensor<64x128xf32>
  // CHECK: %[[T:.*]] = linalg.transpose ins(%arg1 : tensor<128x64xf32>) outs(%[[E]] : tensor<64x128xf32>) permutation = [1, 0]
  %wt = "sft.view"(%w) {map = affine_map<(d0, d1) -> (d1, d0)>} : (tensor<128x64xf32>) -> tensor<64x128xf32>
  // CHECK: %[[F:.*]] = linalg.fill {sft.op = 1 : i64} ins(%{{.*}} : f32)
  %fill = "sft.map"() ({
    gpu.yield %zero : f32
  }) {maps = [], operandSegmentSizes = array<i32: 0, 0, 0, 0, 0, 0, 0, 0>} : () -> tensor<8x128xf32>
  // CHECK: %[[MM:.*]] = linalg.matmul {sft.op = 2 : i64} ins(%arg0, %[[T]] : tensor<8x64xf32>, tensor<64x128xf32>) outs(%[[F]] : tensor<8x128xf32>)
  %mm = "sft.contract"(%x, %wt, %fill) {domain = array<i64: 8, 128, 64>,
      maps = [affine_map<(m, n, k) -> (m, k)>, affine_map<(m, n, k) -> (k, n)>, affine_map<(m, n, k) -> (m, n)>]}
      : (tensor<8x64xf32>, tensor<64x128xf32>, tensor<8x128xf32>) -> tensor<8x128xf32>
  // CHECK: tensor.expand_shape %[[MM]] {{\[}}[0, 1], [2]] output_shape [4, 2, 128]
  %split = "sft.view"(%mm) {map = affine_map<(d0, d1, d2) -> (d0 * 2 + d1, d2)>} : (tensor<8x128xf32>) -> tensor<4x2x128xf32>
  // CHECK: tensor.pad %arg2 low[0, 0, 1, 1] high[0, 0, 1, 1]
  %pad = "sft.view"(%img, %zero) {map = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2 - 1, d3 - 1)>} : (tensor<1x3x8x8xf32>, f32) -> tensor<1x3x10x10xf32>
  return %mm, %split, %pad : tensor<8x128xf32>, tensor<4x2x128xf32>, tensor<1x3x10x10xf32>
}
