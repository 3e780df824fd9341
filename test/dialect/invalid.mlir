// RUN: iree-opt --irdl-file=%irdl %s --split-input-file --verify-diagnostics
// The IRDL definitions reject malformed sft ops.

func.func @missing_maps(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @below {{attribute "maps" is expected but not provided}}
  %0 = "sft.map"(%x) ({
  ^bb0(%a: f32):
    gpu.yield %a : f32
  }) {operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0>} : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @scalar_input(%x: f32) -> tensor<4xf32> {
  // expected-error @below {{expected base type 'builtin.tensor' but got 'builtin.f32'}}
  %0 = "sft.map"(%x) ({
  ^bb0(%a: f32):
    gpu.yield %a : f32
  }) {maps = [], operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0>} : (f32) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @contract_missing_init(%a: tensor<4x4xf32>) -> tensor<4x4xf32> {
  // expected-error @below {{expects exactly 3 operands, but got 2}}
  %0 = "sft.contract"(%a, %a) {domain = array<i64: 4, 4, 4>, maps = []} : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  return %0 : tensor<4x4xf32>
}

// -----

func.func @view_map_not_affine(%a: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @below {{expected base attribute 'builtin.affine_map' but got 'builtin.string'}}
  %0 = "sft.view"(%a) {map = "transpose"} : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @index_without_dim() -> index {
  // expected-error @below {{attribute "dim" is expected but not provided}}
  %0 = "sft.index"() : () -> index
  return %0 : index
}
