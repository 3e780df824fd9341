// RUN: sft-opt -p 'sft-reassociate{orders=3:(0,(1,2))}' %s | filecheck %s
// RUN: sft-opt -p 'sft-reassociate{orders=3:((0,1),2)}' %s | filecheck %s --check-prefix=WRITTEN
// RUN: not sft-opt -p 'sft-reassociate{orders=3:((0,2),1)}' %s 2>&1 | filecheck %s --check-prefix=ILLEGAL
// RUN: not sft-opt -p 'sft-reassociate{orders=1:(0,(1,2))}' %s 2>&1 | filecheck %s --check-prefix=MISSING
// RUN: not sft-opt -p 'sft-reassociate{orders=3:(0,}' %s 2>&1 | filecheck %s --check-prefix=SYNTAX
// sft-reassociate evaluates (A B) C as A (B C): 512 multiply-adds instead of 1024.

// CHECK-DAG: #[[CL:.*]] = affine_map<(d0, d1, d2) -> (d2, d0)>
// CHECK-DAG: #[[BT:.*]] = affine_map<(d0, d1, d2) -> (d1, d2)>
// CHECK-DAG: #[[OUT:.*]] = affine_map<(d0, d1, d2) -> (d0, d1)>
// CHECK-DAG: #[[A:.*]] = affine_map<(d0, d1, d2) -> (d0, d2)>
// CHECK-LABEL: func.func @chain
// CHECK: %[[F:.*]] = "sft.map"()
// CHECK: () -> tensor<8x4xf32>
// CHECK: %[[Z:.*]] = "sft.map"()
// CHECK: () -> tensor<4x4xf32>
// CHECK: %[[U:.*]] = "sft.contract"(%arg2, %arg1, %[[Z]]) {domain = array<i64: 4, 4, 8>, maps = [#[[CL]], #[[BT]], #[[OUT]]]}
// CHECK: %[[R:.*]] = "sft.contract"(%arg0, %[[U]], %[[F]]) {domain = array<i64: 8, 4, 4>, maps = [#[[A]], #[[BT]], #[[OUT]]]}
// CHECK-NOT: tensor<8x8xf32>
// CHECK: return %[[R]]
// WRITTEN: "sft.contract"(%arg0, %arg1
// WRITTEN: tensor<8x8xf32>
// ILLEGAL: error: plan gives the chain at op 3 the order ((0, 2), 1), which is not a legal order of its 3 operands
// SYNTAX: error: sft-reassociate takes orders=OP:TREE;..., not 'orders=3:(0,'
// MISSING: error: plan reorders a chain at op 1, which the program does not have
func.func @chain(%a: tensor<8x4xf32>, %b: tensor<4x8xf32>, %c: tensor<8x4xf32>) -> tensor<8x4xf32> {
  %zero = arith.constant 0.0 : f32
  %f1 = "sft.map"() ({
    gpu.yield %zero : f32
  }) {maps = [], operandSegmentSizes = array<i32: 0, 0, 0, 0, 0, 0, 0, 0>} : () -> tensor<8x8xf32>
  %t = "sft.contract"(%a, %b, %f1) {domain = array<i64: 8, 8, 4>,
      maps = [affine_map<(m, n, k) -> (m, k)>, affine_map<(m, n, k) -> (k, n)>, affine_map<(m, n, k) -> (m, n)>]}
      : (tensor<8x4xf32>, tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>
  %f2 = "sft.map"() ({
    gpu.yield %zero : f32
  }) {maps = [], operandSegmentSizes = array<i32: 0, 0, 0, 0, 0, 0, 0, 0>} : () -> tensor<8x4xf32>
  %r = "sft.contract"(%t, %c, %f2) {domain = array<i64: 8, 4, 8>,
      maps = [affine_map<(m, n, k) -> (m, k)>, affine_map<(m, n, k) -> (k, n)>, affine_map<(m, n, k) -> (m, n)>]}
      : (tensor<8x8xf32>, tensor<8x4xf32>, tensor<8x4xf32>) -> tensor<8x4xf32>
  return %r : tensor<8x4xf32>
}
