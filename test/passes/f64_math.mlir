// RUN: sft-opt -p 'sft-expand-f64-math' %s | filecheck %s
// sft-expand-f64-math: an f64 math.tanh / sin / cos / atan / atan2 / erf in a scalar body becomes
// arith ops only (IREE's CPU executables have no f64 libm); f32 math and f64 ops IREE
// compiles itself (exp) are left alone.

#map = affine_map<(d0) -> (d0)>
// CHECK-LABEL: func.func @f64_math
func.func @f64_math(%a: tensor<8xf64>, %b: tensor<8xf64>) -> tensor<8xf64> {
  %e = tensor.empty() : tensor<8xf64>
  // CHECK: linalg.generic
  // CHECK-NOT: math.tanh
  // CHECK-NOT: math.atan2
  // CHECK: arith.bitcast %{{.*}} : f64 to i64
  // CHECK: math.exp
  // CHECK: linalg.yield
  %r = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel"]}
      ins(%a, %b : tensor<8xf64>, tensor<8xf64>) outs(%e : tensor<8xf64>) {
  ^bb0(%x: f64, %y: f64, %o: f64):
    %t = math.tanh %x : f64
    %u = math.atan2 %t, %y : f64
    %v = math.exp %u : f64
    linalg.yield %v : f64
  } -> tensor<8xf64>
  return %r : tensor<8xf64>
}

// CHECK-LABEL: func.func @f32_untouched
// CHECK: math.tanh %{{.*}} : f32
// CHECK-NOT: arith.bitcast
func.func @f32_untouched(%a: tensor<8xf32>) -> tensor<8xf32> {
  %e = tensor.empty() : tensor<8xf32>
  %r = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]}
      ins(%a : tensor<8xf32>) outs(%e : tensor<8xf32>) {
  ^bb0(%x: f32, %o: f32):
    %t = math.tanh %x : f32
    linalg.yield %t : f32
  } -> tensor<8xf32>
  return %r : tensor<8xf32>
}
