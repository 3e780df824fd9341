// RUN: sft-opt -p 'sft-split-batch{parts=2 args=0:0,1:0,2:1}' %s | filecheck %s
// RUN: not sft-opt -p 'sft-split-batch{parts=2 args=0:0,1:0}' %s 2>&1 | filecheck %s --check-prefix=HALF
// sft-split-batch on the weights: a two-layer MLP cut along its hidden dim (8), the first
// weight's rows and bias and the second weight's columns, each part 4 of the hidden units.
// The part sums its share of the second layer; the join adds the two partial sums and the
// second bias, and takes neither the input nor a cut weight.

// CHECK-LABEL: func.func @mlp
// CHECK-SAME: (%arg0: tensor<4x3xf32>, %arg1: tensor<4xf32>, %arg2: tensor<5x4xf32>, %arg3: tensor<5xf32>, %arg4: tensor<2x3xf32>) -> tensor<2x5xf32>
// CHECK: "sft.contract"{{.*}}domain = array<i64: 2, 4, 3>{{.*}} -> tensor<2x4xf32>
// CHECK: "sft.contract"{{.*}}domain = array<i64: 2, 5, 4>{{.*}} -> tensor<2x5xf32>
// CHECK-NOT: arith.addf
// CHECK: return {{.*}} : tensor<2x5xf32>
// CHECK-LABEL: func.func @mlp_join0
// CHECK-SAME: (%arg0: tensor<5xf32>, %arg1: tensor<2x5xf32>, %arg2: tensor<2x5xf32>) -> tensor<2x5xf32>
// CHECK: "sft.map"(%arg1, %arg2)
// CHECK: arith.addf
// CHECK: "sft.map"(%{{.*}}, %arg0)
// CHECK: arith.addf
// CHECK: return

// HALF: error: sft-split-batch cannot split this program's batch: an op reads its batch loop from a value that is not split

#t = affine_map<(d0, d1) -> (d1, d0)>
#a = affine_map<(d0, d1, d2) -> (d0, d2)>
#b = affine_map<(d0, d1, d2) -> (d2, d1)>
#c = affine_map<(d0, d1, d2) -> (d0, d1)>
#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d1)>
module {
  func.func @mlp(%w1: tensor<8x3xf32>, %b1: tensor<8xf32>, %w2: tensor<5x8xf32>, %b2: tensor<5xf32>, %x: tensor<2x3xf32>) -> tensor<2x5xf32> {
    %zero = arith.constant 0.000000e+00 : f32
    %w1t = "sft.view"(%w1) {map = #t} : (tensor<8x3xf32>) -> tensor<3x8xf32>
    %i1 = "sft.map"() ({
      gpu.yield %zero : f32
    }) {maps = [], operandSegmentSizes = array<i32: 0, 0, 0, 0, 0, 0, 0, 0>} : () -> tensor<2x8xf32>
    %h = "sft.contract"(%x, %w1t, %i1) {domain = array<i64: 2, 8, 3>, maps = [#a, #b, #c]} : (tensor<2x3xf32>, tensor<3x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
    %hb = "sft.map"(%h, %b1) ({
    ^bb0(%p: f32, %q: f32):
      %s = arith.addf %p, %q : f32
      gpu.yield %s : f32
    }) {maps = [#id, #row], operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0>} : (tensor<2x8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
    %r = "sft.map"(%hb) ({
    ^bb0(%p: f32):
      %m = arith.maximumf %p, %zero : f32
      gpu.yield %m : f32
    }) {maps = [#id], operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0>} : (tensor<2x8xf32>) -> tensor<2x8xf32>
    %w2t = "sft.view"(%w2) {map = #t} : (tensor<5x8xf32>) -> tensor<8x5xf32>
    %i2 = "sft.map"() ({
      gpu.yield %zero : f32
    }) {maps = [], operandSegmentSizes = array<i32: 0, 0, 0, 0, 0, 0, 0, 0>} : () -> tensor<2x5xf32>
    %y = "sft.contract"(%r, %w2t, %i2) {domain = array<i64: 2, 5, 8>, maps = [#a, #b, #c]} : (tensor<2x8xf32>, tensor<8x5xf32>, tensor<2x5xf32>) -> tensor<2x5xf32>
    %out = "sft.map"(%y, %b2) ({
    ^bb0(%p: f32, %q: f32):
      %s = arith.addf %p, %q : f32
      gpu.yield %s : f32
    }) {maps = [#id, #row], operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0>} : (tensor<2x5xf32>, tensor<5xf32>) -> tensor<2x5xf32>
    return %out : tensor<2x5xf32>
  }
}
