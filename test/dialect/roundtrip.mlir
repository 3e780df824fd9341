// RUN: iree-opt --irdl-file=%irdl %s | iree-opt --irdl-file=%irdl | filecheck %s
// Every sft op parses, verifies against its IRDL definition, prints and parses again.

// CHECK-DAG: #[[SPLIT:.*]] = affine_map<(d0, d1) -> (d0 * 2 + d1)>
// CHECK-DAG: #[[PAD:.*]] = affine_map<(d0, d1) -> (d0 - 1, d1)>
// CHECK-LABEL: func.func @ops
func.func @ops(%x: tensor<4x8xf32>, %b: tensor<8xf32>, %w: tensor<8x16xf32>) -> tensor<4x16xf32> {
  %zero = arith.constant 0.0 : f32
  // CHECK: "sft.map"() ({
  // CHECK-NEXT: gpu.yield %{{.*}} : f32
  %fill = "sft.map"() ({
    gpu.yield %zero : f32
  }) {maps = [], operandSegmentSizes = array<i32: 0, 0, 0, 0, 0, 0, 0, 0>} : () -> tensor<4x16xf32>
  // CHECK: "sft.map"(%{{.*}}, %{{.*}}) ({
  // CHECK: arith.addf
  %sum = "sft.map"(%x, %b) ({
  ^bb0(%a: f32, %c: f32):
    %s = arith.addf %a, %c : f32
    gpu.yield %s : f32
  }) {maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d1)>],
      operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0>} : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  // CHECK: "sft.contract"(%{{.*}}, %{{.*}}, %{{.*}}) {domain = array<i64: 4, 16, 8>
  %mm = "sft.contract"(%sum, %w, %fill) {domain = array<i64: 4, 16, 8>,
      maps = [affine_map<(m, n, k) -> (m, k)>, affine_map<(m, n, k) -> (k, n)>, affine_map<(m, n, k) -> (m, n)>]}
      : (tensor<4x8xf32>, tensor<8x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  // CHECK: "sft.reduce"(%{{.*}}, %{{.*}}) ({
  // CHECK: kind = "max"
  %row = "sft.map"() ({
    gpu.yield %zero : f32
  }) {maps = [], operandSegmentSizes = array<i32: 0, 0, 0, 0, 0, 0, 0, 0>} : () -> tensor<4xf32>
  %max = "sft.reduce"(%mm, %row) ({
  ^bb0(%a: f32):
    %i = "sft.index"() {dim = 1 : i64} : () -> index
    gpu.yield %a : f32
  }) {domain = array<i64: 4, 16>, kind = "max", maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0)>],
      operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0, 1>} : (tensor<4x16xf32>, tensor<4xf32>) -> tensor<4xf32>
  // CHECK: "sft.view"(%{{.*}}) {map = #{{.*}}} : (tensor<4xf32>) -> tensor<2x2xf32>
  %split = "sft.view"(%max) {map = affine_map<(d0, d1) -> (d0 * 2 + d1)>} : (tensor<4xf32>) -> tensor<2x2xf32>
  // CHECK: "sft.view"(%{{.*}}, %{{.*}}) {map = #{{.*}}} : (tensor<4x16xf32>, f32) -> tensor<6x16xf32>
  %pad = "sft.view"(%mm, %zero) {map = affine_map<(d0, d1) -> (d0 - 1, d1)>} : (tensor<4x16xf32>, f32) -> tensor<6x16xf32>
  // CHECK: "sft.opaque"() ({
  // CHECK: tensor.concat
  %cat = "sft.opaque"() ({
    %c = tensor.concat dim(0) %max, %max : (tensor<4xf32>, tensor<4xf32>) -> tensor<8xf32>
    gpu.yield %c : tensor<8xf32>
  }) {resultSegmentSizes = array<i32: 1, 0, 0, 0>} : () -> tensor<8xf32>
  return %mm : tensor<4x16xf32>
}
