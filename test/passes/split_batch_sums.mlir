// RUN: sft-opt -p 'sft-split-batch{parts=2 args=1}' %s | filecheck %s
// sft-split-batch on a program that sums over its batch (a training step: a weight's gradient
// is a contraction over it, the loss a reduction): each part sums its own rows from zero and
// returns its partial sums after the results that carry its batch; the join functions add the
// parts' partials and compute the rest (the update, the loss's scale), the results in two
// groups of about equal bytes, one function each, side by side.

// CHECK-LABEL: func.func @step(%arg0: tensor<8x8xf32>, %arg1: tensor<2x8xf32>) -> (tensor<2x8xf32>, tensor<8x8xf32>, tensor<f32>)
// CHECK: "sft.contract"(%arg1, %arg1, %{{.*}}) {domain = array<i64: 8, 8, 2>
// CHECK: "sft.reduce"(%arg1, %{{.*}})
// CHECK: domain = array<i64: 2, 8>, kind = "add"
// CHECK-NOT: arith.subf
// CHECK: return {{.*}} : tensor<2x8xf32>, tensor<8x8xf32>, tensor<f32>
// CHECK-LABEL: func.func @step_join0(%arg0: tensor<8x8xf32>, %arg1: tensor<8x8xf32>, %arg2: tensor<8x8xf32>, %arg3: tensor<f32>, %arg4: tensor<f32>) -> tensor<8x8xf32>
// CHECK: %[[SUM:.*]] = "sft.map"(%arg1, %arg2)
// CHECK: arith.addf
// CHECK: "sft.map"(%arg0, %[[SUM]])
// CHECK: arith.subf
// CHECK-LABEL: func.func @step_join1({{.*}}) -> tensor<f32>
// CHECK: %[[TOTAL:.*]] = "sft.map"(%arg3, %arg4)
// CHECK: "sft.map"(%[[TOTAL]])
// CHECK: arith.mulf

func.func @step(%w: tensor<8x8xf32>, %x: tensor<4x8xf32>) -> (tensor<8x8xf32>, tensor<f32>, tensor<4x8xf32>) {
  %zero = arith.constant 0.0 : f32
  %rate = arith.constant 0.1 : f32
  %init = "sft.map"() ({
    gpu.yield %zero : f32
  }) {maps = [], operandSegmentSizes = array<i32: 0, 0, 0, 0, 0, 0, 0, 0>} : () -> tensor<8x8xf32>
  %gram = "sft.contract"(%x, %x, %init) {domain = array<i64: 8, 8, 4>,
      maps = [affine_map<(i, j, b) -> (b, i)>, affine_map<(i, j, b) -> (b, j)>, affine_map<(i, j, b) -> (i, j)>]}
      : (tensor<4x8xf32>, tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>
  %new = "sft.map"(%w, %gram) ({
  ^bb0(%p: f32, %g: f32):
    %s = arith.mulf %g, %rate : f32
    %d = arith.subf %p, %s : f32
    gpu.yield %d : f32
  }) {maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>],
      operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0>} : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>
  %none = "sft.map"() ({
    gpu.yield %zero : f32
  }) {maps = [], operandSegmentSizes = array<i32: 0, 0, 0, 0, 0, 0, 0, 0>} : () -> tensor<f32>
  %total = "sft.reduce"(%x, %none) ({
  ^bb0(%v: f32):
    gpu.yield %v : f32
  }) {domain = array<i64: 4, 8>, kind = "add", maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> ()>],
      operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0, 1>} : (tensor<4x8xf32>, tensor<f32>) -> tensor<f32>
  %loss = "sft.map"(%total) ({
  ^bb0(%t: f32):
    %m = arith.mulf %t, %rate : f32
    gpu.yield %m : f32
  }) {maps = [affine_map<() -> ()>], operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0>} : (tensor<f32>) -> tensor<f32>
  %twice = "sft.map"(%x, %x) ({
  ^bb0(%a: f32, %b: f32):
    %s = arith.addf %a, %b : f32
    gpu.yield %s : f32
  }) {maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>],
      operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0>} : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return %new, %loss, %twice : tensor<8x8xf32>, tensor<f32>, tensor<4x8xf32>
}
