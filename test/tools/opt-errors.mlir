// RUN: not sft-opt %s 2>&1 | filecheck %s
// RUN: echo 'module {}' | not sft-opt --pass-pipeline=sft-nope 2>&1 | filecheck %s --check-prefix=PASS
// Malformed input: one line naming file, line and column; exit code 1; no traceback.

// CHECK: sft-opt: {{.*}}opt-errors.mlir:[[# @LINE + 2]]:8: error: custom op 'linalg.nope' is unknown
// CHECK-NOT: Traceback
  %0 = linalg.nope
// PASS: sft-opt: error: unknown sft pass 'sft-nope'
