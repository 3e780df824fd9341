// RUN: sft-opt -p 'sft-hold-packed{args=0:8:32}' %s | filecheck %s
// sft-hold-packed on a batch matmul of the weight's broadcast (torch's attention projecting
// a [seq, batch, dim] input): the batch's rows taken as rows ([4, 2, 128] as [8, 128]), packed,
// multiplied by mmt4d and unpacked, then reshaped back; the broadcast gone.

// CHECK-LABEL: func.func @project(%arg0: tensor<3x128x32x1xf32>, %arg1: tensor<4x2x128xf32>) -> tensor<4x2x96xf32>
// CHECK-NOT: linalg.broadcast
// CHECK: %[[A:.*]] = tensor.collapse_shape %arg1 {{\[\[}}0, 1], [2]] : tensor<4x2x128xf32> into tensor<8x128xf32>
// CHECK: %[[AP:.*]] = linalg.pack %[[A]] inner_dims_pos = [0, 1] inner_tiles = [8, 1]
// CHECK: %[[P:.*]] = linalg.mmt4d ins(%[[AP]], %arg0 : tensor<1x128x8x1xf32>, tensor<3x128x32x1xf32>)
// CHECK: %[[R:.*]] = linalg.unpack %[[P]] {{.*}} -> tensor<8x96xf32>
// CHECK: %[[E:.*]] = tensor.expand_shape %[[R]] {{\[\[}}0, 1], [2]] output_shape [4, 2, 96] : tensor<8x96xf32> into tensor<4x2x96xf32>
// CHECK-NOT: linalg.batch_matmul
// CHECK: return %[[E]]
func.func @project(%w: tensor<128x96xf32>, %x: tensor<4x2x128xf32>) -> tensor<4x2x96xf32> {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<4x128x96xf32>
  %wb = linalg.broadcast ins(%w : tensor<128x96xf32>) outs(%e : tensor<4x128x96xf32>) dimensions = [0]
  %empty = tensor.empty() : tensor<4x2x96xf32>
  %fill = linalg.fill ins(%zero : f32) outs(%empty : tensor<4x2x96xf32>) -> tensor<4x2x96xf32>
  %y = linalg.batch_matmul ins(%x, %wb : tensor<4x2x128xf32>, tensor<4x128x96xf32>) outs(%fill : tensor<4x2x96xf32>) -> tensor<4x2x96xf32>
  return %y : tensor<4x2x96xf32>
}
