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

// A 7-loop contraction in the NHWC / HWCF layout (stride 2 on rows, dilation 2 on columns) is
// linalg.conv_2d_nhwc_hwcf again, and one in the NCHW / FCHW layout conv_2d_nchw_fchw: IREE's CPU
// codegen keeps its convolution strategy for the named ops only.
// CHECK-LABEL: func.func @convs
func.func @convs(%img: tensor<2x9x9x3xf32>, %filt: tensor<3x3x3x4xf32>, %init: tensor<2x4x5x4xf32>,
                 %img2: tensor<1x3x6x6xf32>, %filt2: tensor<4x3x3x3xf32>, %init2: tensor<1x4x4x4xf32>)
    -> (tensor<2x4x5x4xf32>, tensor<1x4x4x4xf32>) {
  // CHECK: linalg.conv_2d_nhwc_hwcf {dilations = dense<[1, 2]> : tensor<2xi64>, {{.*}}strides = dense<[2, 1]> : tensor<2xi64>} ins(%arg0, %arg1
  %c = "sft.contract"(%img, %filt, %init) {domain = array<i64: 2, 4, 5, 4, 3, 3, 3>,
      maps = [affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, d1 * 2 + d4, d2 + d5 * 2, d6)>,
              affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d4, d5, d6, d3)>,
              affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, d1, d2, d3)>]}
      : (tensor<2x9x9x3xf32>, tensor<3x3x3x4xf32>, tensor<2x4x5x4xf32>) -> tensor<2x4x5x4xf32>
  // CHECK: linalg.conv_2d_nchw_fchw {dilations = dense<1> : tensor<2xi64>, {{.*}}strides = dense<1> : tensor<2xi64>} ins(%arg3, %arg4
  %c2 = "sft.contract"(%img2, %filt2, %init2) {domain = array<i64: 1, 4, 4, 4, 3, 3, 3>,
      maps = [affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, d4, d2 + d5, d3 + d6)>,
              affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d1, d4, d5, d6)>,
              affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, d1, d2, d3)>]}
      : (tensor<1x3x6x6xf32>, tensor<4x3x3x3xf32>, tensor<1x4x4x4xf32>) -> tensor<1x4x4x4xf32>
  return %c, %c2 : tensor<2x4x5x4xf32>, tensor<1x4x4x4xf32>
}

// A max over a 2x2 window of stride 2 (NHWC) is linalg.pooling_nhwc_max, with the window as a
// shape-only tensor.
// CHECK-LABEL: func.func @pool
func.func @pool(%x: tensor<1x8x8x3xf32>, %init: tensor<1x4x4x3xf32>) -> tensor<1x4x4x3xf32> {
  // CHECK: %[[W:.*]] = tensor.empty() : tensor<2x2xf32>
  // CHECK: linalg.pooling_nhwc_max {dilations = dense<1> : tensor<2xi64>, {{.*}}strides = dense<2> : tensor<2xi64>} ins(%arg0, %[[W]]
  %p = "sft.reduce"(%x, %init) ({
  ^bb0(%a: f32):
    gpu.yield %a : f32
  }) {domain = array<i64: 1, 4, 4, 3, 2, 2>, kind = "max",
      maps = [affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1 * 2 + d4, d2 * 2 + d5, d3)>,
              affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1, d2, d3)>],
      operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0, 1>}
      : (tensor<1x8x8x3xf32>, tensor<1x4x4x3xf32>) -> tensor<1x4x4x3xf32>
  return %p : tensor<1x4x4x3xf32>
}
