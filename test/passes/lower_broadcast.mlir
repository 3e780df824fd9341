// RUN: sft-opt --sft-lower %s | filecheck %s
// A view that broadcasts through a constant index (JAX's keepdims mean: (d0, d1, d2) -> (d0, d1, 0))
// is neither a slice nor a plain broadcast: it lowers to a generic that reads through the map.

// CHECK-DAG: #[[IN:.*]] = affine_map<(d0, d1, d2) -> (d0, d1, 0)>
// CHECK-LABEL: func.func @keepdims
func.func @keepdims(%a: tensor<2x16x1xf32>) -> tensor<2x16x64xf32> {
  // CHECK: linalg.generic {indexing_maps = [#[[IN]], #{{.*}}], iterator_types = ["parallel", "parallel", "parallel"]} ins(%arg0 : tensor<2x16x1xf32>)
  // CHECK-NOT: tensor.extract_slice
  %b = "sft.view"(%a) {map = affine_map<(d0, d1, d2) -> (d0, d1, 0)>} : (tensor<2x16x1xf32>) -> tensor<2x16x64xf32>
  return %b : tensor<2x16x64xf32>
}

// CHECK-LABEL: func.func @slice
func.func @slice(%a: tensor<8x16xf32>) -> tensor<4x16xf32> {
  // CHECK: tensor.extract_slice %arg0[2, 0] [4, 16] [1, 1]
  %b = "sft.view"(%a) {map = affine_map<(d0, d1) -> (d0 + 2, d1)>} : (tensor<8x16xf32>) -> tensor<4x16xf32>
  return %b : tensor<4x16xf32>
}
