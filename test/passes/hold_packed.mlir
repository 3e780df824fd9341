// RUN: sft-opt -p 'sft-hold-packed{args=0:8:32}' %s | filecheck %s
// RUN: not sft-opt -p 'sft-hold-packed{args=1:8:32}' %s 2>&1 | filecheck %s --check-prefix=ILLEGAL
// RUN: not sft-opt -p 'sft-hold-packed{args=0:8:48}' %s 2>&1 | filecheck %s --check-prefix=PANELS
// sft-hold-packed: a weight held [K, N], read as B of a matmul, is taken in panels of 32
// columns ([N/32, K, 32, 1]); the matmul becomes A packed in blocks of 8 rows (20 rows: the
// last block padded with zeros), mmt4d, and the result unpacked to [M, N].

// CHECK-LABEL: func.func @linear(%arg0: tensor<2x256x32x1xf32>, %arg1: tensor<20x256xf32>) -> tensor<20x64xf32>
// CHECK: %[[A:.*]] = linalg.pack %arg1 padding_value(%{{.*}} : f32) inner_dims_pos = [0, 1] inner_tiles = [8, 1] into %{{.*}} : tensor<20x256xf32> -> tensor<3x256x8x1xf32>
// CHECK: %[[C:.*]] = linalg.pack %{{.*}} padding_value(%{{.*}} : f32) inner_dims_pos = [0, 1] inner_tiles = [8, 32] into %{{.*}} : tensor<20x64xf32> -> tensor<3x2x8x32xf32>
// CHECK: %[[P:.*]] = linalg.mmt4d ins(%[[A]], %arg0 : tensor<3x256x8x1xf32>, tensor<2x256x32x1xf32>) outs(%[[C]] : tensor<3x2x8x32xf32>)
// CHECK: %[[R:.*]] = linalg.unpack %[[P]] inner_dims_pos = [0, 1] inner_tiles = [8, 32] into %{{.*}} : tensor<3x2x8x32xf32> -> tensor<20x64xf32>
// CHECK-NOT: linalg.matmul
// CHECK: return %[[R]]
// ILLEGAL: error: plan holds argument 1 packed in 8x32 blocks: it is not a matrix (held: plan.held) read only as B of f32 matmuls
// PANELS: error: plan holds argument 0 packed in 8x48 blocks
func.func @linear(%w: tensor<256x64xf32>, %x: tensor<20x256xf32>) -> tensor<20x64xf32> {
  %zero = arith.constant 0.0 : f32
  %empty = tensor.empty() : tensor<20x64xf32>
  %fill = linalg.fill ins(%zero : f32) outs(%empty : tensor<20x64xf32>) -> tensor<20x64xf32>
  %y = linalg.matmul ins(%x, %w : tensor<20x256xf32>, tensor<256x64xf32>) outs(%fill : tensor<20x64xf32>) -> tensor<20x64xf32>
  return %y : tensor<20x64xf32>
}
