"""f64 elementary functions IREE's CPU backend cannot compile, stated in arithmetic it can.

`functions` holds the algorithms, written once over an arithmetic; `numpy_arith` runs them on
numpy arrays (accuracy checks), passes/f64_math.py emits them as MLIR arith ops.
"""
