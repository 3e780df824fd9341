// RUN: sft-opt --sft-raise %s | filecheck %s
// RUN: sft-opt --sft-raise %s | filecheck %s --check-prefix=WINDOW
// sft-raise states linalg as sft: contractions, maps, reductions and views, with no
// destinations left and transposes/broadcasts folded into index maps.

// CHECK-LABEL: func.func @linear
func.func @linear(%x: tensor<8x64xf32>, %w: tensor<128x64xf32>, %b: tensor<128xf32>) -> tensor<8x128xf32> {
  %zero = arith.constant 0.0 : f32
  %e0 = tensor.empty() : tensor<64x128xf32>
  // CHECK: %[[WT:.*]] = "sft.view"(%arg1) {map = #[[T:.*]]} : (tensor<128x64xf32>) -> tensor<64x128xf32>
  %wt = linalg.transpose ins(%w : tensor<128x64xf32>) outs(%e0 : tensor<64x128xf32>) permutation = [1, 0]
  %e1 = tensor.empty() : tensor<8x128xf32>
  // CHECK: %[[Z:.*]] = "sft.map"() ({
  // CHECK-NEXT: gpu.yield %{{.*}} : f32
  %fill = linalg.fill ins(%zero : f32) outs(%e1 : tensor<8x128xf32>) -> tensor<8x128xf32>
  // CHECK: %[[MM:.*]] = "sft.contract"(%arg0, %[[WT]], %[[Z]]) {domain = array<i64: 8, 128, 64>
  %mm = linalg.matmul ins(%x, %wt : tensor<8x64xf32>, tensor<64x128xf32>) outs(%fill : tensor<8x128xf32>) -> tensor<8x128xf32>
  // CHECK: "sft.map"(%[[MM]], %arg2) ({
  // CHECK: arith.addf
  // CHECK: gpu.yield
  // CHECK-NOT: linalg.
  %y = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d1)>, affine_map<(d0, d1) -> (d0, d1)>],
                       iterator_types = ["parallel", "parallel"]}
      ins(%mm, %b : tensor<8x128xf32>, tensor<128xf32>) outs(%e1 : tensor<8x128xf32>) {
  ^bb0(%in: f32, %in_0: f32, %out: f32):
    %s = arith.addf %in, %in_0 : f32
    linalg.yield %s : f32
  } -> tensor<8x128xf32>
  return %y : tensor<8x128xf32>
}

// CHECK-LABEL: func.func @row_max_and_reshape
func.func @row_max_and_reshape(%x: tensor<4x32xf32>) -> tensor<4x1xf32> {
  %ninf = arith.constant 0xFF800000 : f32
  %e = tensor.empty() : tensor<4xf32>
  %init = linalg.fill ins(%ninf : f32) outs(%e : tensor<4xf32>) -> tensor<4xf32>
  // CHECK: "sft.reduce"(%arg0, %{{.*}}) ({
  // CHECK-NEXT: ^bb0(%[[A:.*]]: f32):
  // CHECK-NEXT: gpu.yield %[[A]] : f32
  // CHECK: kind = "max"
  %m = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0)>],
                      iterator_types = ["parallel", "reduction"]}
      ins(%x : tensor<4x32xf32>) outs(%init : tensor<4xf32>) {
  ^bb0(%in: f32, %out: f32):
    %r = arith.maximumf %in, %out : f32
    linalg.yield %r : f32
  } -> tensor<4xf32>
  // CHECK: "sft.view"(%{{.*}}) {map = #{{.*}}} : (tensor<4xf32>) -> tensor<4x1xf32>
  %ex = tensor.expand_shape %m [[0, 1]] output_shape [4, 1] : tensor<4xf32> into tensor<4x1xf32>
  return %ex : tensor<4x1xf32>
}

// CHECK-LABEL: func.func @unsupported_is_carried
func.func @unsupported_is_carried(%a: tensor<2xf32>) -> tensor<4xf32> {
  // CHECK: "sft.opaque"() ({
  // CHECK-NEXT: tensor.concat
  // CHECK-NEXT: gpu.yield
  %c = tensor.concat dim(0) %a, %a : (tensor<2xf32>, tensor<2xf32>) -> tensor<4xf32>
  return %c : tensor<4xf32>
}

// A bf16 x bf16 product accumulated in f32 (JAX's preferred_element_type, IREE's mixed
// matmul) is a contraction whose inputs stay bf16.
// CHECK-LABEL: func.func @mixed_precision_matmul
func.func @mixed_precision_matmul(%a: tensor<8x16xbf16>, %b: tensor<16x4xbf16>) -> tensor<8x4xf32> {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<8x4xf32>
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<8x4xf32>) -> tensor<8x4xf32>
  // CHECK: "sft.contract"(%arg0, %arg1, %{{.*}}) {domain = array<i64: 8, 4, 16>
  // CHECK-SAME: (tensor<8x16xbf16>, tensor<16x4xbf16>, tensor<8x4xf32>) -> tensor<8x4xf32>
  %m = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d2)>, affine_map<(d0, d1, d2) -> (d2, d1)>, affine_map<(d0, d1, d2) -> (d0, d1)>],
                       iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%a, %b : tensor<8x16xbf16>, tensor<16x4xbf16>) outs(%f : tensor<8x4xf32>) {
  ^bb0(%x: bf16, %y: bf16, %acc: f32):
    %xf = arith.extf %x : bf16 to f32
    %yf = arith.extf %y : bf16 to f32
    %p = arith.mulf %xf, %yf : f32
    %s = arith.addf %acc, %p : f32
    linalg.yield %s : f32
  } -> tensor<8x4xf32>
  return %m : tensor<8x4xf32>
}

// An input extended and also read otherwise is a reduction, not a contraction.
// CHECK-LABEL: func.func @extended_and_read_again
func.func @extended_and_read_again(%a: tensor<8x16xbf16>, %b: tensor<16x4xbf16>) -> tensor<8x4xf32> {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<8x4xf32>
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<8x4xf32>) -> tensor<8x4xf32>
  // CHECK: "sft.reduce"
  %m = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d2)>, affine_map<(d0, d1, d2) -> (d2, d1)>, affine_map<(d0, d1, d2) -> (d0, d1)>],
                       iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%a, %b : tensor<8x16xbf16>, tensor<16x4xbf16>) outs(%f : tensor<8x4xf32>) {
  ^bb0(%x: bf16, %y: bf16, %acc: f32):
    %xf = arith.extf %x : bf16 to f32
    %yf = arith.extf %y : bf16 to f32
    %p = arith.mulf %xf, %yf : f32
    %q = arith.mulf %p, %xf : f32
    %s = arith.addf %acc, %q : f32
    linalg.yield %s : f32
  } -> tensor<8x4xf32>
  return %m : tensor<8x4xf32>
}

// A gather at positions affine in the loops (torch-mlir's max pooling indices: the window's
// element read back with tensor.extract) becomes an input read through that map; the rest of
// the body (a first-match combiner) is no sft reduction, so the generic is carried, extract-free.
// WINDOW: #[[$WIN:.*]] = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1 * 2 + d3, d2 * 2 + d4)>
// WINDOW: ins(%{{.*}}, %{{.*}}, %arg0 :
// CHECK-LABEL: func.func @pool_indices
// CHECK: "sft.opaque"
// CHECK: linalg.generic {indexing_maps = [#{{.*}}, #{{.*}}, #{{.*}}, #{{.*}}]
// CHECK-SAME: ins(%{{.*}}, %{{.*}}, %arg0 :
// CHECK-NOT: tensor.extract
// CHECK: linalg.yield
func.func @pool_indices(%x: tensor<2x8x8xf32>, %max: tensor<2x4x4xf32>) -> tensor<2x4x4xi64> {
  %c2 = arith.constant 2 : index
  %c8 = arith.constant 8 : index
  %none = arith.constant -1 : i64
  %e = tensor.empty() : tensor<2x4x4xi64>
  %init = linalg.fill ins(%none : i64) outs(%e : tensor<2x4x4xi64>) -> tensor<2x4x4xi64>
  %window = tensor.empty() : tensor<2x2xi64>
  %r = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d2)>,
                                        affine_map<(d0, d1, d2, d3, d4) -> (d3, d4)>,
                                        affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d2)>],
                       iterator_types = ["parallel", "parallel", "parallel", "reduction", "reduction"]}
      ins(%max, %window : tensor<2x4x4xf32>, tensor<2x2xi64>) outs(%init : tensor<2x4x4xi64>) {
  ^bb0(%m: f32, %w: i64, %out: i64):
    %i0 = linalg.index 0 : index
    %i1 = linalg.index 1 : index
    %i2 = linalg.index 2 : index
    %i3 = linalg.index 3 : index
    %i4 = linalg.index 4 : index
    %h0 = arith.muli %i1, %c2 : index
    %h = arith.addi %h0, %i3 : index
    %w0 = arith.muli %i2, %c2 : index
    %wi = arith.addi %w0, %i4 : index
    %v = tensor.extract %x[%i0, %h, %wi] : tensor<2x8x8xf32>
    %eq = arith.cmpf oeq, %v, %m : f32
    %flat = arith.muli %h, %c8 : index
    %pos = arith.addi %flat, %wi : index
    %pos64 = arith.index_cast %pos : index to i64
    %pick = arith.select %eq, %pos64, %out : i64
    %first = arith.cmpi eq, %out, %none : i64
    %res = arith.select %first, %pick, %out : i64
    linalg.yield %res : i64
  } -> tensor<2x4x4xi64>
  return %r : tensor<2x4x4xi64>
}

// A diagonal read (x[i, i] of a 4x4 tensor over 3 loops) stays a gather: as an input indexed
// (d0, d0), linalg would read the loop's extent (4) off it.
// CHECK-LABEL: func.func @diagonal_stays_a_gather
// CHECK: tensor.extract
func.func @diagonal_stays_a_gather(%x: tensor<4x4xf32>) -> tensor<3xf32> {
  %e = tensor.empty() : tensor<3xf32>
  %r = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>], iterator_types = ["parallel"]}
      outs(%e : tensor<3xf32>) {
  ^bb0(%out: f32):
    %i = linalg.index 0 : index
    %v = tensor.extract %x[%i, %i] : tensor<4x4xf32>
    linalg.yield %v : f32
  } -> tensor<3xf32>
  return %r : tensor<3xf32>
}
