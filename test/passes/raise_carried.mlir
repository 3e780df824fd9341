// RUN: sft-opt --sft-raise %s | filecheck %s
// Ops sft cannot state, of any dialect IREE accepts (torch-mlir's tm_tensor here, in its custom
// syntax), are carried through unchanged inside sft.opaque.

// CHECK-LABEL: func.func @cumsum
func.func @cumsum(%x: tensor<5xf32>) -> tensor<5xf32> {
  %cst = arith.constant 0.000000e+00 : f32
  %0 = tensor.empty() : tensor<5xf32>
  %1 = linalg.fill ins(%cst : f32) outs(%0 : tensor<5xf32>) -> tensor<5xf32>
  %2 = tensor.empty() : tensor<f32>
  %3 = linalg.fill ins(%cst : f32) outs(%2 : tensor<f32>) -> tensor<f32>
  // CHECK: "sft.opaque"() ({
  // CHECK-NEXT: "tm_tensor.scan"
  // CHECK: gpu.yield
  %4:2 = tm_tensor.scan dimension(0) inclusive(true) ins(%x : tensor<5xf32>) outs(%1, %3 : tensor<5xf32>, tensor<f32>) {
  ^bb0(%a: f32, %b: f32):
    %5 = arith.addf %a, %b : f32
    tm_tensor.yield %5 : f32
  } -> tensor<5xf32>, tensor<f32>
  return %4#0 : tensor<5xf32>
}

// torch-mlir writes tanh-GELU's sqrt(2/pi) as 0.797724; sft-raise restores it.
// CHECK-LABEL: func.func @gelu_constant
func.func @gelu_constant(%x: tensor<4xf32>) -> tensor<4xf32> {
  // CHECK-DAG: arith.constant 4.471500e-02 : f32
  // CHECK-DAG: arith.constant 0.797884583 : f32
  %c = arith.constant 4.471500e-02 : f32
  %s = arith.constant 7.977240e-01 : f32
  %0 = tensor.empty() : tensor<4xf32>
  %1 = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>], iterator_types = ["parallel"]} ins(%x : tensor<4xf32>) outs(%0 : tensor<4xf32>) {
  ^bb0(%in: f32, %out: f32):
    %2 = arith.mulf %in, %c : f32
    %3 = arith.mulf %2, %s : f32
    linalg.yield %3 : f32
  } -> tensor<4xf32>
  return %1 : tensor<4xf32>
}
