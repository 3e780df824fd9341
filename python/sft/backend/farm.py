"""A tuning farm on Ray: verify's candidate compiles and timings on a cluster's workers.

Addresses (`sft.compile(..., search="verify", farm=ADDRESS)`, or $SFT_RAY_ADDRESS):

    "local"            a Ray cluster on this machine alone, one worker per core
    "local:N"          the same with N workers (`ray.init(num_cpus=N)`)
    "auto"             the cluster `ray start` runs on this machine
    "ray://host:port"  a remote cluster through Ray Client (anything else goes to `ray.init`;
                       a cluster with token authentication, Ray's default, also needs
                       RAY_AUTH_MODE=token and its token here)

A process keeps one Ray connection: where `ray.init` already ran (a test's cluster, the user's
own), the farm uses it whatever the address says. Every node must have this sft installed with
the same pinned packages: tasks are module-level functions of this module, imported there by
name, so that Ray never pickles (or imports) the caller's `__main__`.

Where work goes. Each node is probed once per target (a task pinned to it) for two identities:
the *compile identity* (IREE's version and the target's compile key: its flags and, for the
host, the CPU signature `-target-cpu=host` resolves to, the key of the module cache and of the
tuning database) and the *timing identity* (that, the machine's CPU signature and cores, and a
driver that loads). Compiles go to any node whose compile identity is the target's, up to one
per CPU. All the variants of one comparison go together, as one task holding a whole node, to
one node whose timing identity is the target's, where `timing.time_variants` (or
`bench.benchmark`) runs them in processes as it does here: never two machines in one
comparison, never a compile beside a timing. Each task checks its identity again and refuses
a mismatch. On a local cluster every worker matches.

Failures. A task whose worker dies, that raises, or that does not answer within its bound (the
work's own timeouts, $SFT_COMPILE_TIMEOUT or $SFT_RUN_TIMEOUT, plus `grace` for a worker to
start) is a recorded failure (`Farm.failures`, one line each) and is queued once more, on
another node where there is one; failing again, its candidates fail as verify already handles
(no artifact, seconds None). A candidate IREE refuses to compile is not a worker failure.
"""

from __future__ import annotations

import hashlib
import os
import time
import warnings
from functools import partial

from ..errors import SftError
from .bench import benchmark
from .iree import compile_module, compile_timeout, run_timeout
from .timing import Timing, time_together, time_variants

FARM_ENV = "SFT_RAY_ADDRESS"
THREADS_ENV = "OMP_NUM_THREADS"
GRACE = 120.0   # seconds for a task's worker to start and import sft on a busy node
_FARMS: dict = {}  # address -> Farm
_TASKS: dict = {}  # function -> its Ray task


def _ray():
    """The ray module, imported only when a farm is asked for: sft runs without it."""
    try:
        import ray
    except ImportError:
        raise SftError("a tuning farm needs Ray, which is not installed: "
                       "pip install -e '.[farm]'") from None
    return ray


def _digest(*parts) -> str:
    return hashlib.sha256("|".join(map(str, parts)).encode()).hexdigest()[:16]


def compile_identity(target) -> str:
    """Who may compile for `target`: a machine where it has this compile key and IREE."""
    from .cache import IREE_VERSION

    return _digest(IREE_VERSION, target.name, *target.compile_key())


def timing_identity(target) -> str:
    """Who may time `target`'s code: a machine of the target's compile identity whose CPU and
    cores are this one's (the target's, where this is the machine it was built on)."""
    from ..cost.host import cpu_signature

    return _digest(compile_identity(target), cpu_signature(), target.desc.cores)


def _local_identities(name: str) -> tuple[str, str | None]:
    """This machine's identities for the target named `name` (timing: None where its driver
    has no device here)."""
    from ..targets import get_target
    from .runtime import check_driver

    target = get_target(name)
    try:
        check_driver(target.driver)
    except SftError:
        return compile_identity(target), None
    return compile_identity(target), timing_identity(target)


def _check(kind: str, name: str, expected: str) -> None:
    """Refuse work meant for another machine (a mismatch the probe would have seen, or a node
    whose id now names another machine)."""
    found = _local_identities(name)[0 if kind == "compile" else 1]
    if found != expected:
        raise SftError(f"this worker is not a {kind} machine for target {name!r}")


# -- the tasks (module-level: Ray imports them by name on the workers) -------------------------

def _probe_task(name: str) -> tuple[str, str | None]:
    return _local_identities(name)


def _compile_task(text: str, target, flags: tuple, expected: str, attempt: int, hook):
    if hook is not None:
        hook("compile", attempt)
    _check("compile", target.name, expected)
    try:
        return compile_module(text, target, flags)
    except SftError as e:  # IREE refuses the candidate: its answer, not the worker's failure
        return e.message


def _call_task(fn, args: tuple, name: str, expected: str, attempt: int, hook, threads):
    if hook is not None:
        hook("time", attempt)
    _check("time", name, expected)
    # Ray sets OMP_NUM_THREADS to a task's CPUs; the timed processes inherit the environment
    # a timing here would have (`threads`: the caller's setting, None where it has none)
    os.environ.pop(THREADS_ENV, None)
    if threads is not None:
        os.environ[THREADS_ENV] = threads
    return fn(*args)


def _why(error: Exception) -> str:
    """One line for a task's failure: the task's own exception where it raised one."""
    cause = getattr(error, "cause", None)
    error = cause if isinstance(cause, Exception) else error
    text = error.message if isinstance(error, SftError) else str(error)
    lines = [l.strip() for l in text.strip().splitlines() if l.strip()]
    return f"{type(error).__name__}: {lines[0][:200] if lines else ''}"


class Farm:
    """A connection to a Ray cluster that compiles and times verify's candidates.

    `hook`, if given, is called in the worker at the start of each task as `hook(kind,
    attempt)` (kind "compile" or "time", attempt 0 or 1): a test's way to make a worker die.
    It must be a module-level function that the workers can import."""

    def __init__(self, address: str = "local", hook=None, grace: float = GRACE):
        self.address, self.hook, self.grace = address, hook, grace
        self.failures: list[str] = []   # one line per failed task, in order
        self._identities: dict = {}     # (node id, target name) -> (compile, timing) or None
        self._connect()

    def _connect(self) -> None:
        ray = _ray()
        if ray.is_initialized():
            return
        address = self.address
        try:
            if address == "local" or address.startswith("local:"):
                text = address.partition(":")[2]
                if text and not (text.isdigit() and int(text) > 0):
                    raise SftError(f"farm address {address!r}: 'local:N' needs a number of workers")
                # "local" to ray.init: a new cluster of our own, never one `ray start` left here
                ray.init(address="local", num_cpus=int(text) if text else os.cpu_count(),
                         include_dashboard=False, log_to_driver=False, logging_level="ERROR")
            else:  # (Ray Client's server refuses most other options of ray.init)
                ray.init(address=address)
        except SftError:
            raise
        except Exception as e:  # noqa: BLE001 (Ray raises many kinds for one unreachable cluster)
            raise SftError(f"farm: cannot connect to Ray at {address!r}: {_why(e)}") from None

    def compile(self, jobs: dict, target) -> dict:
        """name -> Artifact for each `name -> (text, flags)` compiled for `target` on the
        cluster, side by side; an SftError in place of the artifact of a candidate IREE refused
        or whose workers failed twice."""
        if not jobs:
            return {}
        expected = compile_identity(target)
        nodes = self._nodes(target, 0, expected)
        task = _remote(_compile_task)

        def submit(node, job, attempt):
            text, flags = job
            return task.options(num_cpus=1, max_retries=0, scheduling_strategy=_on(node)).remote(
                text, target, tuple(flags), expected, attempt, self.hook)

        results = self._run("compile", jobs, nodes, submit, compile_timeout() + self.grace)
        return {name: SftError(r) if isinstance(r, str) else r for name, r in results.items()}

    def time_variants(self, target, builders: dict, rounds: int, calls: int,
                      together: bool = False) -> dict:
        """`timing.time_variants(builders, rounds, calls)` (`time_together` where `together`)
        on one node of the target's timing identity; every variant failed (its error: the
        farm's) where its workers failed twice."""
        if not builders:
            return {}
        # together: every variant in two processes, and again alone where one of them crashed
        bound = (rounds + 2) * len(builders) * (run_timeout() + 0.2) * (3 if together else 1)
        found = self._call(target, time_together if together else time_variants,
                           (builders, rounds, calls), bound)
        if isinstance(found, SftError):
            return {name: Timing(error=found.message) for name in builders}
        return found

    def benchmark(self, target, variants: dict, inputs: list, rounds: int, cpu_time: bool) -> dict:
        """`bench.benchmark(variants, inputs, rounds, cpu_time=...)` on one node of the target's
        timing identity; None for every variant where its workers failed twice."""
        if not variants:
            return {}
        bound = rounds * len(variants) * 60.0  # benchmark's own bound per run
        found = self._call(target, partial(benchmark, cpu_time=cpu_time), (variants, inputs, rounds),
                           bound)
        return {name: None for name in variants} if isinstance(found, SftError) else found

    def _call(self, target, fn, args: tuple, bound: float):
        """fn(*args) on a node of `target`'s timing identity, holding all its CPUs (nothing
        else runs there meanwhile); an SftError where it failed twice."""
        expected = timing_identity(target)
        nodes = self._nodes(target, 1, expected)
        task = _remote(_call_task)

        def submit(node, job, attempt):
            placed = task.options(num_cpus=nodes[node], max_retries=0, scheduling_strategy=_on(node))
            return placed.remote(fn, args, target.name, expected, attempt, self.hook,
                                 os.environ.get(THREADS_ENV))

        return self._run("timing", {"comparison": None}, {n: 1 for n in nodes}, submit,
                         bound + self.grace)["comparison"]

    def _nodes(self, target, which: int, expected: str) -> dict:
        """node id -> CPUs of each live node whose identity (0: compile, 1: timing) for
        `target` is `expected`; the nodes not seen before are probed first."""
        ray = _ray()
        alive = {n["NodeID"]: int(n["Resources"].get("CPU", 0)) for n in ray.nodes()
                 if n.get("Alive") and n["Resources"].get("CPU", 0) >= 1}
        unknown = [n for n in alive if (n, target.name) not in self._identities]
        if unknown:
            probe = _remote(_probe_task)
            jobs = {n: None for n in unknown}

            def submit(node, job, attempt):
                placed = probe.options(num_cpus=0, max_retries=0, scheduling_strategy=_on(node))
                return placed.remote(target.name)

            for node, found in self._run("probe", jobs, {n: 1 for n in unknown}, submit, self.grace,
                                         pinned=True).items():
                self._identities[(node, target.name)] = None if isinstance(found, SftError) else found
        matching = {n: cpus for n, cpus in alive.items()
                    if (self._identities.get((n, target.name)) or (None, None))[which] == expected}
        if not matching:
            kind = ("compile", "time")[which]
            raise SftError(f"farm: none of the {len(alive)} live Ray node(s) can {kind} for target "
                           f"{target.name!r} (identity {expected}): sft, IREE, CPU or cores differ"
                           + (f"; last failure: {self.failures[-1]}" if self.failures else ""))
        return matching

    def _run(self, what: str, jobs: dict, slots: dict, submit, bound: float,
             pinned: bool = False) -> dict:
        """key -> result of each job (`submit(node, job, attempt)` starts it on a node with a
        free slot, `slots`: node -> how many at once), or an SftError where it failed twice.
        A job running past `bound` seconds is cancelled (its worker killed) and has failed.
        `pinned` jobs are keyed by their node and only ever run there."""
        ray = _ray()
        queue = [(key, 0, None) for key in jobs]  # (key, attempt, node it failed on)
        free, running, results = dict(slots), {}, {}
        while queue or running:
            for item in list(queue):
                key, attempt, failed_on = item
                options = [n for n in free if free[n] > 0 and (not pinned or n == key)]
                if not options:
                    continue
                node = max(options, key=lambda n: (n != failed_on, free[n]))
                free[node] -= 1
                queue.remove(item)
                running[submit(node, jobs[key], attempt)] = (key, attempt, node, time.monotonic())
            first = min(started for *_, started in running.values())
            ready, _ = ray.wait(list(running), num_returns=1,
                                timeout=max(first + bound - time.monotonic(), 0.0))
            late = [r for r, (*_, started) in running.items() if time.monotonic() > started + bound]
            for ref in dict.fromkeys([*ready, *late]):
                key, attempt, node, _ = running.pop(ref)
                free[node] += 1
                try:
                    if ref not in ready:
                        ray.cancel(ref, force=True)
                        raise TimeoutError(f"no answer within {bound:g} s")
                    results[key] = ray.get(ref)
                    continue
                except Exception as e:  # noqa: BLE001 (a dead worker, a task's error, a hang)
                    why = _why(e)
                self.failures.append(f"{what} {key!s:.40} on node {node[:8]}, try {attempt + 1}: {why}")
                warnings.warn(f"sft farm: {self.failures[-1]}", stacklevel=2)
                if attempt == 0:
                    queue.append((key, 1, node))
                else:
                    results[key] = SftError(f"farm: {what} {key!s:.40} failed twice: {why}")
        return results


def _remote(fn):
    """The Ray task of a module-level function (made once: each is exported to the cluster)."""
    if fn not in _TASKS:
        _TASKS[fn] = _ray().remote(fn)
    return _TASKS[fn]


def _on(node: str):
    """A Ray scheduling strategy: on `node` only."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    return NodeAffinitySchedulingStrategy(node_id=node, soft=False)


def connect(farm) -> Farm | None:
    """The farm `farm` names: a Farm as given, an address connected once per process (and
    kept), None for no farm; None means $SFT_RAY_ADDRESS where it is set, and "" no farm even
    then."""
    if isinstance(farm, Farm):
        return farm
    address = os.environ.get(FARM_ENV, "").strip() if farm is None else farm
    if not isinstance(address, str):
        raise SftError(f"farm must be a Ray address or a Farm, not {type(address).__name__}")
    if not address:
        return None
    _ray()  # (a farm kept from before says nothing of whether ray imports now)
    if address not in _FARMS:
        _FARMS[address] = Farm(address)
    return _FARMS[address]


def shutdown() -> None:
    """Disconnect from Ray (stopping a local cluster the farm started) and forget the farms."""
    _FARMS.clear()
    _TASKS.clear()
    if _ray().is_initialized():
        _ray().shutdown()
