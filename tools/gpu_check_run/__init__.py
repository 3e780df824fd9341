"""gpu_check_run.py DIR: the run phase of tools/gpu-check, on the machine with the GPU.

Standalone on purpose: it never imports sft (whose package loads IREE's compiler bindings, which
that machine does not have). It needs numpy, IREE's runtime (installed from the wheel in DIR
when `import iree.runtime` fails) and torch for the anchors.

    python3 tools/gpu_check_run.py DIR [--out RESULT.json] [--driver cuda] [--rounds 7]

DIR is what `gpu-check prepare` wrote (manifest.json, modules/*.vmfb, models/*.npz, models.py).
The work is split into groups (the bf16 GEMM, one per model, one per model's kernels), each
run in a worker process of its own: a driver that crashes or hangs on one module costs that
group (retried once without the module it was on), never the run. Per group: every module is
loaded, run once and checked against the expected outputs; then every variant (the IREE
modules, PyTorch eager and torch.compile on the same device) is timed in turns, round after
round, and the medians kept. IREE calls are synchronous (the module's native ABI waits on the
work's fence before it returns), inputs and the model's state live on the device, results stay
there; torch's are followed by torch.cuda.synchronize(). Everything is budgeted to finish
within --budget seconds (default 450), whatever fails.

The modules: parent.py (groups, workers, the time budget), worker.py (one group: load, check,
time), anchors.py (PyTorch's side), report.py (the result's rows and table), common.py (what
both sides share).
"""

import argparse


def main(argv=None) -> int:
    """The command line: the parent's, or a worker's (--worker, internal)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dir")
    parser.add_argument("--out", help="result JSON (default DIR/result.json; a .txt table beside it)")
    parser.add_argument("--driver", help="IREE runtime driver (default: the manifest's)")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--budget", type=float, default=450.0, help="seconds the whole run may take")
    parser.add_argument("--compile-budget", type=float, default=240.0,
                        help="seconds of torch.compile warm-ups, all models together")
    parser.add_argument("--no-torch-compile", action="store_true")
    parser.add_argument("--models", help="comma-separated: run these models only")
    parser.add_argument("--no-gemm", action="store_true", help="leave the bf16 GEMM out")
    parser.add_argument("--no-kernels", action="store_true", help="leave the kernels alone out")
    parser.add_argument("--warm-jobs", type=int, default=None,
                        help="torch.compile warm-ups run side by side before timing (default: "
                        "half the cores, at most 8; none on local-* drivers)")
    # the worker side (internal)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--worker-out", help=argparse.SUPPRESS)
    parser.add_argument("--progress", help=argparse.SUPPRESS)
    parser.add_argument("--deadline", type=float, help=argparse.SUPPRESS)
    parser.add_argument("--skip", action="append", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    # Imported here: the parent never needs numpy or torch, only its workers do.
    if args.worker:
        from .worker import worker_main
        return worker_main(args)
    from .parent import parent_main
    return parent_main(args)
