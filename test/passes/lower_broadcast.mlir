// RUN: sft-opt --sft-lower %s | filecheck %s
// A view that broadcasts through a constant index (JAX's keepdims mean: (d0, d1, d2) -> (d0, d1, 0))
// is neither a slice nor a plain broadcast: it lowers to a rank-reducing slice, then a broadcast.

// CHECK-LABEL: func.func @keepdims
func.func @keepdims(%a: tensor<2x16x1xf32>) -> tensor<2x16x64xf32> {
  // CHECK: %[[S:.*]] = tensor.extract_slice %arg0[0, 0, 0] [2, 16, 1] [1, 1, 1] : tensor<2x16x1xf32> to tensor<2x16xf32>
  // CHECK: linalg.broadcast ins(%[[S]] : tensor<2x16xf32>) outs(%{{.*}} : tensor<2x16x64xf32>) dimensions = [2]
  %b = "sft.view"(%a) {map = affine_map<(d0, d1, d2) -> (d0, d1, 0)>} : (tensor<2x16x1xf32>) -> tensor<2x16x64xf32>
  return %b : tensor<2x16x64xf32>
}

// Any other view reads through its map in a generic: a transpose that also broadcasts.
// CHECK-LABEL: func.func @transposed_broadcast
func.func @transposed_broadcast(%a: tensor<4x2xf32>) -> tensor<2x3x4xf32> {
  // CHECK: linalg.generic {indexing_maps = [#{{.*}}, #{{.*}}], iterator_types = ["parallel", "parallel", "parallel"]} ins(%arg0 : tensor<4x2xf32>)
  %b = "sft.view"(%a) {map = affine_map<(d0, d1, d2) -> (d2, d0)>} : (tensor<4x2xf32>) -> tensor<2x3x4xf32>
  return %b : tensor<2x3x4xf32>
}

// CHECK-LABEL: func.func @slice
func.func @slice(%a: tensor<8x16xf32>) -> tensor<4x16xf32> {
  // CHECK: tensor.extract_slice %arg0[2, 0] [4, 16] [1, 1]
  %b = "sft.view"(%a) {map = affine_map<(d0, d1) -> (d0 + 2, d1)>} : (tensor<8x16xf32>) -> tensor<4x16xf32>
  return %b : tensor<4x16xf32>
}
