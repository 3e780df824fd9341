// The sft dialect: a whole model as index-notation math.
//
// This file is the dialect's single source of truth. `sft.dialect` loads it in-process through
// torch-mlir's IRDL bindings; lit tests load it with `iree-opt --irdl-file`.
//
// Each operand and result has its own constraint: in IRDL one constraint value shared by two
// operands, or by the elements of one variadic operand, forces them to have the same type. So a
// list of tensors of different shapes is a row of optional slots (in0..in7, r0..r3), and the
// op carries operandSegmentSizes / resultSegmentSizes as IRDL requires: `sft.ops` builds them.
//
// Conventions shared by every op:
// - Values are tensors with static shapes. No op has a destination operand: results are fresh.
// - An op's iteration domain is a box of loops d0..dN-1. `maps` holds one affine map per tensor
//   operand, from the domain to that operand's indices, then (for reductions) one for the result.
//   Transposes and broadcasts are never materialised: they live in these maps.
// - Scalar bodies are regions of one block whose arguments are the operands' elements, in operand
//   order, terminated by `gpu.yield` (IRDL cannot declare terminators; `gpu.yield` is upstream's
//   return-like terminator with no parent constraint). A body may read values defined above it
//   (scalar constants, a table read with tensor.extract) and the loop position with `sft.index`.
// - `sft-verify` checks the rules IRDL cannot state (map counts, ranks, body types) and reports
//   them with the op's location.

irdl.dialect @sft {
  // sft.map: an elementwise function over the result's index space.
  //   result[d] = body(inputs[0][maps[0](d)], ..., inputs[n-1][maps[n-1](d)])
  // Operands: `inputs` (slots in0..in7), up to eight tensors (zero makes a fill: the body yields a value defined
  //   above). Attributes: `maps`, one affine map per input, domain = the result's rank.
  // Example (a bias add that broadcasts %b over rows):
  //   %r = "sft.map"(%x, %b) ({
  //   ^bb0(%a: f32, %c: f32):
  //     %s = arith.addf %a, %c : f32
  //     gpu.yield %s : f32
  //   }) {maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d1)>],
  //       operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 0, 0>}
  //     : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  irdl.operation @map {
    %in0 = irdl.base "!builtin.tensor"
    %in1 = irdl.base "!builtin.tensor"
    %in2 = irdl.base "!builtin.tensor"
    %in3 = irdl.base "!builtin.tensor"
    %in4 = irdl.base "!builtin.tensor"
    %in5 = irdl.base "!builtin.tensor"
    %in6 = irdl.base "!builtin.tensor"
    %in7 = irdl.base "!builtin.tensor"
    %result = irdl.base "!builtin.tensor"
    %array = irdl.base "#builtin.array"
    %body = irdl.region
    irdl.operands(in0: optional %in0, in1: optional %in1, in2: optional %in2, in3: optional %in3, in4: optional %in4, in5: optional %in5, in6: optional %in6, in7: optional %in7)
    irdl.attributes {"maps" = %array}
    irdl.regions(body: %body)
    irdl.results(result: %result)
  }

  // sft.reduce: combine body values over the domain dims that the result map leaves out.
  //   result[maps[-1](d)] = init[..] <kind> body(inputs[i][maps[i](d)]...) over all d
  // Operands: `inputs` (slots in0..in7, up to eight tensors), then `init`, the starting value of each result element (usually
  //   an sft.map fill with the identity of `kind`). Attributes: `maps` (inputs..., result),
  //   `domain` (the static extent of each loop), `kind`: "add", "mul", "max", "min", "maxnum",
  //   "minnum" (the arith combiner; integer types use the signed integer ops), or "and", "or"
  //   (integers and booleans).
  // Example (row sums of squares):
  //   %r = "sft.reduce"(%x, %zeros) ({
  //   ^bb0(%a: f32):
  //     %s = arith.mulf %a, %a : f32
  //     gpu.yield %s : f32
  //   }) {domain = array<i64: 4, 8>, kind = "add",
  //       maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0)>],
  //       operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0, 1>}
  //     : (tensor<4x8xf32>, tensor<4xf32>) -> tensor<4xf32>
  irdl.operation @reduce {
    %in0 = irdl.base "!builtin.tensor"
    %in1 = irdl.base "!builtin.tensor"
    %in2 = irdl.base "!builtin.tensor"
    %in3 = irdl.base "!builtin.tensor"
    %in4 = irdl.base "!builtin.tensor"
    %in5 = irdl.base "!builtin.tensor"
    %in6 = irdl.base "!builtin.tensor"
    %in7 = irdl.base "!builtin.tensor"
    %init = irdl.base "!builtin.tensor"
    %result = irdl.base "!builtin.tensor"
    %array = irdl.base "#builtin.array"
    %dense = irdl.base "#builtin.dense_array"
    %string = irdl.base "#builtin.string"
    %body = irdl.region
    irdl.operands(in0: optional %in0, in1: optional %in1, in2: optional %in2, in3: optional %in3, in4: optional %in4, in5: optional %in5, in6: optional %in6, in7: optional %in7, init: %init)
    irdl.attributes {"maps" = %array, "domain" = %dense, "kind" = %string}
    irdl.regions(body: %body)
    irdl.results(result: %result)
  }

  // sft.contract: a sum of products, the einsum of two tensors.
  //   result[maps[2](d)] = init[..] + sum over reduced d of lhs[maps[0](d)] * rhs[maps[1](d)]
  // Dims in the result map are parallel, the others are summed. Convolutions are contractions
  // whose maps add loop indices (affine_map<(n, f, y, x, c, ky, kx) -> (n, c, y * 2 + ky, ...)>).
  // Attributes: `maps` (lhs, rhs, result), `domain` (loop extents).
  // Example (a matmul):
  //   %r = "sft.contract"(%a, %b, %zeros) {domain = array<i64: 4, 8, 16>,
  //       maps = [affine_map<(m, n, k) -> (m, k)>, affine_map<(m, n, k) -> (k, n)>,
  //               affine_map<(m, n, k) -> (m, n)>]}
  //     : (tensor<4x16xf32>, tensor<16x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  irdl.operation @contract {
    %lhs = irdl.base "!builtin.tensor"
    %rhs = irdl.base "!builtin.tensor"
    %init = irdl.base "!builtin.tensor"
    %result = irdl.base "!builtin.tensor"
    %array = irdl.base "#builtin.array"
    %dense = irdl.base "#builtin.dense_array"
    irdl.operands(lhs: %lhs, rhs: %rhs, init: %init)
    irdl.attributes {"maps" = %array, "domain" = %dense}
    irdl.results(result: %result)
  }

  // sft.view: a pure re-indexing of one tensor; it moves no data by itself.
  //   result[d] = source[map(d)], or `padding` where map(d) falls outside source.
  // `map` goes from result indices to source indices. A permutation is a transpose, a dropped
  // dim a broadcast, `d * s + o` a strided slice, `d - o` with `padding` a pad, and floordiv/mod
  // or `d0 * N + d1` a reshape that splits or merges dims.
  // Operands: `source`, and an optional scalar `padding`. Attributes: `map`.
  // Example (split a 32-vector into 4x8):
  //   %r = "sft.view"(%x) {map = affine_map<(d0, d1) -> (d0 * 8 + d1)>}
  //     : (tensor<32xf32>) -> tensor<4x8xf32>
  irdl.operation @view {
    %source = irdl.base "!builtin.tensor"
    %result = irdl.base "!builtin.tensor"
    %scalar = irdl.any
    %affine = irdl.base "#builtin.affine_map"
    irdl.operands(source: %source, padding: optional %scalar)
    irdl.attributes {"map" = %affine}
    irdl.results(result: %result)
  }

  // sft.index: the current position along loop `dim`, inside a map or reduce body.
  // Example: %i = "sft.index"() {dim = 1 : i64} : () -> index
  irdl.operation @index {
    %index = irdl.is index
    %int = irdl.base "#builtin.integer"
    irdl.attributes {"dim" = %int}
    irdl.results(result: %index)
  }

  // sft.opaque: an op sft cannot state yet, carried through unchanged so nothing is dropped.
  // Results: up to four (slots r0..r3). Its single-block region holds the original op(s), reading values defined above, and ends with
  // a `gpu.yield` of what the op produced. Lowering inlines it back.
  // Example:
  //   %r = "sft.opaque"() ({
  //     %c = tensor.concat dim(0) %a, %b : (tensor<2xf32>, tensor<2xf32>) -> tensor<4xf32>
  //     gpu.yield %c : tensor<4xf32>
  //   }) {resultSegmentSizes = array<i32: 1, 0, 0, 0>} : () -> tensor<4xf32>
  irdl.operation @opaque {
    %r0 = irdl.any
    %r1 = irdl.any
    %r2 = irdl.any
    %r3 = irdl.any
    %body = irdl.region
    irdl.regions(body: %body)
    irdl.results(r0: optional %r0, r1: optional %r1, r2: optional %r2, r3: optional %r3)
  }
}
