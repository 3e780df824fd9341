"""sft-fuzz: differential fuzzing of sft against numpy.

Generates random well-typed programs in the sft dialect (contractions with random index
patterns, elementwise maps, reductions and views over shapes of 1 and small primes, f32 and
f64), draws random plans for each from the search space (chain orders, batch expansion, tile
candidates, backend options and driver), compiles them with sft.compile, runs them and compares
with the numpy value the generator computed; about a third of the runs give sft the program
as linalg (sft-lower's output) instead, so that sft-raise is checked too.

Outcomes: ok; skipped (an illegal fusion group: the plan's fault); group-refused (IREE cannot
compile a fusion group's region; reported, not failed); and the failures crash, reject (sft.compile
fails under the empty plan too), plan-illegal, plan-compile, run, wrong (sft/fuzz/check.py has
the rule); a failure that is an open bug already pinned (sft/fuzz/known.py) is counted as
"known NAME", not as a failure. Each failure goes to --out as a folder holding program.mlir, plan.json, inputs.npz
(arg_0.. in argument order) and outcome.txt (group-refused ones too); summary-SEED.json groups them by signature. The
last line: "N programs, M plans, K failures (by kind)"; the exit status is 1 when K > 0.
Program i of seed S is reproducible alone: --seed S --start i --n 1.
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import shutil
import sys
from pathlib import Path

import numpy as np
from tqdm import tqdm

from ..fuzz import FAILURES, Outcome, RandomChooser, draw_and_run, generate, run, run_search
from ..fuzz.known import known_bug
from ..fuzz.programs import SIZES
from ..errors import SftError
from ..plan import Plan
from ..targets import get_target


def _rng_seed(seed: int, program: int, plan: int) -> int:
    return (seed * 1_000_003 + program) * 101 + plan


def signature(outcome) -> str:
    """The failure's first line without temporary paths and positions, to group alike ones."""
    lines = [l for l in outcome.detail.splitlines() if l.strip()]
    if outcome.kind == "crash":  # the exception and the innermost frame it came from
        frames = [l.strip() for l in lines if l.strip().startswith("File ")]
        head = lines[0] if lines else ""
        return head[:160] + (f" [{frames[-1]}]" if frames else "")
    first = lines[0] if lines else ""
    return re.sub(r"/\S+/in\.mlir:\d+:\d+: ", "", first)[:200]


def save(out: Path, name: str, program, plan: Plan, outcome: Outcome) -> None:
    where = out / name
    where.mkdir(parents=True, exist_ok=True)
    (where / "program.mlir").write_text(program.text)
    (where / "plan.json").write_text(plan.to_json() + "\n")
    np.savez(where / "inputs.npz", *program.inputs)
    (where / "outcome.txt").write_text(f"{outcome.kind}\n{outcome.detail}\n")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="sft-fuzz", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=100, help="programs to generate (default 100)")
    p.add_argument("--seed", type=int, default=0, help="campaign seed (default 0)")
    p.add_argument("--start", type=int, default=0, help="index of the first program (default 0)")
    p.add_argument("--plans", type=int, default=2,
                   help="plans per program; the first is the empty plan when --default (default 2)")
    p.add_argument("--default", action="store_true",
                   help="compile each program under the empty plan too, as its first plan")
    p.add_argument("--search-every", type=int, default=0, metavar="K",
                   help="also compile every K-th program with search='model' as one more plan "
                        "(slow: up to 8 IREE profiles a program; default 0, never)")
    p.add_argument("--max-ops", type=int, default=5, help="ops per program at most (default 5)")
    p.add_argument("--sizes", default=None, metavar="N,N,...",
                   help="the extents dims are drawn from (default 1,2,3,5,7,13,4,8,16: unit dims "
                        "and small primes that no tile divides); powers of two such as 4,8,16,32 "
                        "let more kernel configs apply (a GPU campaign)")
    p.add_argument("--summed-last", action="store_true",
                   help="contractions sum over their innermost loops (the kernels sft tiles); with "
                        "--sizes, a campaign aimed at kernel configs")
    p.add_argument("--dtype", choices=["f32", "f64"], help="one element type (default: f64 for a fifth)")
    p.add_argument("--out", type=Path, default=Path("fuzz-failures"),
                   help="folder for failures (default ./fuzz-failures)")
    p.add_argument("--all-kernels", action="store_true",
                   help="tile every contraction kernel the space names, not only those IREE "
                        "compiles with the same loops (what the search tiles)")
    p.add_argument("--target", default="host", help="compile target (default host; plans are "
                                                     "drawn and run on it)")
    args = p.parse_args(argv)
    if args.n < 0 or args.plans < 1 or args.max_ops < 1:
        p.error("--n must be >= 0, --plans and --max-ops >= 1")
    try:
        sizes = tuple(int(x) for x in args.sizes.split(",")) if args.sizes else SIZES
    except ValueError:
        p.error(f"--sizes takes comma-separated integers, not {args.sizes!r}")
    if not sizes or min(sizes) < 1:
        p.error(f"--sizes takes positive extents, not {args.sizes!r}")
    try:
        target = get_target(args.target)
    except SftError as err:
        p.error(err.message)

    kinds: collections.Counter[str] = collections.Counter()
    plans = tiled = 0
    configs: collections.Counter[str] = collections.Counter()  # kernel configs drawn, by pipeline
    log = []
    with tqdm(range(args.start, args.start + args.n), desc="sft-fuzz", unit="prog") as bar:
        for i in bar:
            try:
                program = generate(RandomChooser(_rng_seed(args.seed, i, 0)), args.dtype, args.max_ops, sizes,
                                   args.summed_last)
            except Exception as exc:  # noqa: BLE001 - the generator's own bug, not sft's
                kinds["generator-error"] += 1
                log.append({"program": i, "kind": "generator-error", "detail": repr(exc)})
                continue
            searched = args.search_every > 0 and i % args.search_every == 0
            for j in range(args.plans + searched):
                if j == args.plans:
                    plan, outcome = run_search(program, target)
                elif args.default and j == 0:
                    plan = Plan()
                    outcome = run(program, plan, target)
                else:
                    # a segfault takes the campaign down without an outcome: leave the evidence
                    save(args.out, "current", program, Plan(),
                         Outcome("running", f"--seed {args.seed} --start {i} --n 1, plan {j}"))
                    ch = RandomChooser(_rng_seed(args.seed, i, j + 1))
                    plan, outcome = draw_and_run(program, ch, target, args.all_kernels)
                plans += 1
                tiled += bool(plan.tiles)
                configs.update(getattr(c, "pipeline", "cpu tiles") for _, c in plan.tiles)
                known = known_bug(program, plan, outcome, target) if outcome.failed else None
                kind = f"known {known}" if known else outcome.kind
                kinds[kind] += 1
                if known is None and (outcome.failed or outcome.kind == "group-refused"):
                    save(args.out, f"{args.seed}-{i}-{j}-{outcome.kind}", program, plan, outcome)
                    log.append({"program": i, "plan": j, "kind": outcome.kind,
                                "signature": signature(outcome)})
            bar.set_postfix(fail=sum(kinds[k] for k in FAILURES), skip=kinds["skipped"])
    failures = sum(kinds[k] for k in FAILURES)
    distinct = collections.Counter(f"{e['kind']}: {e.get('signature', e.get('detail'))}" for e in log)
    if log:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / f"summary-{args.seed}.json").write_text(json.dumps(
            {"programs": args.n, "plans": plans, "kinds": dict(kinds),
             "distinct": dict(distinct.most_common()), "failures": log}, indent=1))
    known = sorted(k for k in kinds if k.startswith("known "))
    by_kind = ", ".join(f"{k} {kinds[k]}" for k in ("ok", "skipped", "group-refused", *known,
                                                     *FAILURES, "generator-error") if kinds[k])
    for text, count in distinct.most_common():
        print(f"{count:6d}  {text}")
    shutil.rmtree(args.out / "current", ignore_errors=True)
    drawn = ", ".join(f"{k} {v}" for k, v in configs.most_common())
    print(f"{tiled} plans imposed kernel configs ({drawn or 'none'})")
    print(f"{args.n} programs, {plans} plans, {failures} failures ({by_kind})")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
