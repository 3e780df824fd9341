// RUN: sft-opt -p 'sft-raise,sft-reassociate{orders=7:(0,(1,(2,3)))},sft-lower' %s | filecheck %s
// RUN: not sft-opt -p 'sft-raise,sft-reassociate{orders=5:(0,(1,2))}' %s 2>&1 | filecheck %s --check-prefix=ILLEGAL
// Op ids run across the module's functions (passes/common.compute_ops): the chain in @main is
// named by its last contraction's id counted after @first's two ops, and sft-lower stamps the
// same ids. Per function, the chain would be op 5, which the module does not name a chain.

// CHECK-LABEL: func.func private @first
// CHECK: linalg.fill {sft.op = 0 : i64}
// CHECK: linalg.matmul {sft.op = 1 : i64}
// CHECK-LABEL: func.func @main
// CHECK: linalg.fill {sft.op = 2 : i64}
// CHECK: linalg.generic {{.*}} ins(%arg4, %arg3 : tensor<128x4xf32>, tensor<8x128xf32>) {{.*}} {sft.op = 4 : i64}
// CHECK: {sft.op = 7 : i64}
// ILLEGAL: plan reorders a chain at op 5, which the program does not have
func.func private @first(%a: tensor<16x32xf32>, %b: tensor<32x64xf32>) -> tensor<16x64xf32> {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<16x64xf32>
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<16x64xf32>) -> tensor<16x64xf32>
  %r = linalg.matmul ins(%a, %b : tensor<16x32xf32>, tensor<32x64xf32>) outs(%f : tensor<16x64xf32>) -> tensor<16x64xf32>
  return %r : tensor<16x64xf32>
}
func.func @main(%a: tensor<16x32xf32>, %b: tensor<32x64xf32>, %c: tensor<64x8xf32>, %d: tensor<8x128xf32>, %g: tensor<128x4xf32>) -> tensor<16x4xf32> {
  %z = arith.constant 0.0 : f32
  %ab = call @first(%a, %b) : (tensor<16x32xf32>, tensor<32x64xf32>) -> tensor<16x64xf32>
  %e1 = tensor.empty() : tensor<16x8xf32>
  %f1 = linalg.fill ins(%z : f32) outs(%e1 : tensor<16x8xf32>) -> tensor<16x8xf32>
  %abc = linalg.matmul ins(%ab, %c : tensor<16x64xf32>, tensor<64x8xf32>) outs(%f1 : tensor<16x8xf32>) -> tensor<16x8xf32>
  %e2 = tensor.empty() : tensor<16x128xf32>
  %f2 = linalg.fill ins(%z : f32) outs(%e2 : tensor<16x128xf32>) -> tensor<16x128xf32>
  %r = linalg.matmul ins(%abc, %d : tensor<16x8xf32>, tensor<8x128xf32>) outs(%f2 : tensor<16x128xf32>) -> tensor<16x128xf32>
  %e3 = tensor.empty() : tensor<16x4xf32>
  %f3 = linalg.fill ins(%z : f32) outs(%e3 : tensor<16x4xf32>) -> tensor<16x4xf32>
  %s = linalg.matmul ins(%r, %g : tensor<16x128xf32>, tensor<128x4xf32>) outs(%f3 : tensor<16x4xf32>) -> tensor<16x4xf32>
  return %s : tensor<16x4xf32>
}
