"""`sft doctor --distributed`: the slow rank. Run on every rank of a `torchrun` launch, each rank
times the host microbenchmarks of `sft doctor` at the same time as the others, every rank gathers
every rank's checks, and a rank is flagged where a check is slower than on its peers AND slower
than the cost model predicts, both by more than the threshold (`stragglers.find_stragglers`'s
rule, per check). While some rank looks slow, every rank times the probes again, up to
`CONFIRM` more times, and a rank is flagged only in a check found slow in every one of these
timings: another job loading one rank's core for a while is then not taken for a slow rank,
and a slow rank is slow each time. A rank slower than predicted but no slower than its peers is
shown as such in its checks and not flagged: then the whole group is slow, not one rank (the
plain `sft doctor` judges a machine).

Every rank exits with the same status, as the plain doctor's: 0 no slow rank, 2 a slow rank,
1 an error (a benchmark that did not run on some rank, a peer that did not answer).
"""

from __future__ import annotations

import datetime
import json
import os
import socket
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from .. import doctor
from ..errors import SftError
from .stragglers import compare_ranks

TIMEOUT = 300.0  # seconds a rank waits for its peers (a cold compile cache included)
LAUNCH_ENV = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
# Timings after the first while a rank looks slow. On the shared 2-core VM this was written on,
# idle ranks were found up to 9x slower than their peer in one check (the 16 MiB copy most) in
# a timing of 2 rounds and not in the next; a rank sharing its core with three busy processes
# was 2.3x..3.8x slower than its peer in the matmul every time, with seven 4.4x..5.9x.
CONFIRM = 2
LAUNCH = "torchrun --nproc-per-node N -m sft.tools.doctor --distributed"


@dataclass(frozen=True)
class RankReport:
    """One rank's checks against the model (as `sft doctor` reports a host), against its
    peers (`vs_peers`: seconds over the other ranks' median, in `device.checks`' order), and
    the checks in which it is the slow rank (`slow`)."""

    rank: int
    host: str
    cores: tuple[int, ...]     # the CPUs this rank may run on (its affinity)
    basis: str                 # where its predictions come from: doctor.BASES' keys
    device: doctor.DeviceReport
    vs_peers: tuple[float | None, ...]
    slow: tuple[str, ...]


@dataclass(frozen=True)
class DistributedReport:
    """What every rank found; the same on every rank."""

    threshold: float
    timings: int               # times the probes were timed: a slow rank is slow in every one
    ranks: tuple[RankReport, ...]  # as found by the last timing; `slow`: in every timing

    @property
    def exit_code(self) -> int:
        """1 when a benchmark failed on some rank, 2 when a rank is slow, else 0."""
        if any(r.device.failed for r in self.ranks):
            return 1
        return 2 if any(r.slow for r in self.ranks) else 0

    @property
    def verdict(self) -> str:
        """One line: failed checks, or the slow ranks and by how much, or that none is slow."""
        failed = [f"rank {r.rank}: {r.device.verdict}" for r in self.ranks if r.device.failed]
        if failed:
            return "; ".join(failed)
        slow = [r for r in self.ranks if r.slow]
        if not slow:
            return (f"no slow rank: no rank is {self.threshold:g}x slower than its peers and "
                    "the model")
        return "slow rank{}: {}".format("s" if len(slow) > 1 else "", "; ".join(
            f"rank {r.rank} on {r.host} ({', '.join(_by_how_much(r))})" for r in slow))

    def to_json(self, rank: int) -> str:
        """The whole report as written by `rank` (every rank's file is complete)."""
        data = {"rank": rank, "world_size": len(self.ranks), "verdict": self.verdict,
                "exit_code": self.exit_code, **asdict(self)}
        return json.dumps(data, indent=2, sort_keys=True)

    def to_text(self) -> str:
        """A table: per rank a line, then one per check with its time against the prediction
        and against its peers; the verdict last."""
        lines = [f"{len(self.ranks)} ranks, timed {self.timings}x; a rank is slow in a check that "
                 f"takes more than {self.threshold:g}x both its peers' median and the model's "
                 "prediction each time (the last timing shown)"]
        for r in self.ranks:
            cores = ",".join(map(str, r.cores))
            lines.append(f"rank {r.rank} on {r.host} (cores {cores}; predictions: "
                         f"{r.basis}): {r.device.verdict}"
                         + (f"; slower than its peers: {', '.join(r.slow)}" if r.slow else ""))
            for c, peers in zip(r.device.checks, r.vs_peers):
                shown = "-" if c.measured is None else f"{c.measured:.4g}"
                ratio = "-" if c.ratio is None else f"{c.ratio:.2f}x"
                vs = "-" if peers is None else f"{peers:.2f}x"
                mark = "SLOW RANK" if c.name in r.slow else c.verdict
                lines.append(f"  {c.name:<12} {shown:>10} {c.unit:<8} expected {c.expected:<10.4g}"
                             f" vs predicted {ratio:<7} vs peers {vs:<7} {mark}")
        lines.append(f"verdict: {self.verdict}")
        return "\n".join(lines)


def _by_how_much(r: RankReport) -> list[str]:
    checks = {c.name: (c, p) for c, p in zip(r.device.checks, r.vs_peers)}
    return [f"{name} {checks[name][1]:.1f}x its peers, {checks[name][0].ratio:.1f}x predicted"
            for name in r.slow]


def compare(threshold: float, mine: list[dict],
            before: DistributedReport | None = None) -> DistributedReport:
    """The report from every rank's findings ({rank, host, cores, basis, device}, in rank
    order): per check, the ranks slower than their peers and their prediction, and (given the
    report of the timings `before`) slow in those too."""
    names = [c.name for c in mine[0]["device"].checks]
    per_check = {}
    for i, name in enumerate(names):
        checks = {m["rank"]: m["device"].checks[i] for m in mine}
        per_check[name] = {t.rank: t for t in compare_ranks(
            {r: c.seconds for r, c in checks.items()}, threshold,
            {r: c.expected_seconds for r, c in checks.items()})}
    earlier = {r.rank: r.slow for r in before.ranks} if before else {}
    ranks = tuple(RankReport(m["rank"], m["host"], m["cores"], m["basis"], m["device"],
                             tuple(per_check[n][m["rank"]].vs_peers for n in names),
                             tuple(n for n in names if per_check[n][m["rank"]].straggler
                                   and (before is None or n in earlier.get(m["rank"], ()))))
                  for m in mine)
    return DistributedReport(threshold, before.timings + 1 if before else 1, ranks)


def launch_env() -> tuple[int, int, int]:
    """(rank, world size, local rank) from torchrun's environment; an SftError saying how to
    launch where it is missing."""
    missing = [v for v in LAUNCH_ENV if v not in os.environ]
    if missing:
        raise SftError(f"--distributed runs on every rank of a torchrun launch "
                       f"({', '.join(missing)} not set): `{LAUNCH}`")
    try:
        rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        return rank, world, int(os.environ.get("LOCAL_RANK", rank))
    except ValueError as err:
        raise SftError(f"--distributed: a launch variable is not a number ({err})") from None


def json_path(pattern: str | None, rank: int) -> str | None:
    """Where `rank` writes its report: `pattern` with {rank} replaced; '-' is rank 0's stdout."""
    if pattern is None or pattern == "-":
        return pattern if rank == 0 else None
    if "{rank}" not in pattern:
        raise SftError(f"--json {pattern}: with --distributed the path must hold {{rank}} "
                       "(each rank writes its own report), or be '-' (rank 0's stdout)")
    return pattern.replace("{rank}", str(rank))


def _collective(what: str, rank: int, call):
    """A torch.distributed call; its failure (a peer that died or did not answer within the
    timeout) is one SftError line."""
    try:
        return call()
    except (RuntimeError, ValueError) as err:  # gloo's DistBackendError is a RuntimeError
        first = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise SftError(f"rank {rank}: {what} failed: {first}") from None


def run_distributed_doctor(rounds: int = doctor.ROUNDS, threshold: float = doctor.THRESHOLD,
                           timeout: float = TIMEOUT, json_pattern: str | None = None,
                           progress=None, out=None) -> DistributedReport:
    """Run on every rank under torchrun: time the host probes on all ranks at once, gather
    every rank's checks, write this rank's JSON report (`json_pattern`: a path with {rank}, or
    '-'), print the table on rank 0 (to `out`, stdout by default), and return the report (the
    same on every rank). A process group is initialised with gloo, waiting `timeout` seconds
    at most for a peer, unless one already is (then it is left initialised)."""
    import torch.distributed as dist

    doctor.check_arguments(rounds, threshold)
    if not timeout > 0:
        raise SftError(f"--timeout {timeout:g}: must be a positive number of seconds")
    created = not dist.is_initialized()
    if created:
        rank, world, local = launch_env()
    else:  # the caller's group, however it was set up
        rank, world = dist.get_rank(), dist.get_world_size()
        local = int(os.environ.get("LOCAL_RANK", rank))
    path = json_path(json_pattern, rank)
    if created:
        _collective("joining the process group", rank, lambda: dist.init_process_group(
            "gloo", timeout=datetime.timedelta(seconds=timeout)))
    try:
        desc, basis = doctor.host_description()
        # The first rank of each machine compiles; the others wait and read its compile cache,
        # rather than all compiling the same programs at once.
        probes = doctor.host_probes() if local == 0 else None
        _collective("waiting for the compiles", rank, dist.barrier)
        probes = probes or doctor.host_probes()
        _collective("starting the timings together", rank, dist.barrier)
        device = doctor.check_host(desc, probes, rounds, threshold, progress)
        mine = {"rank": rank, "host": socket.gethostname(),
                "cores": tuple(sorted(os.sched_getaffinity(0))), "basis": basis}
        report = None
        for timing in range(1, CONFIRM + 2):
            every = [None] * world
            _collective("gathering the ranks' checks", rank,
                        lambda: dist.all_gather_object(every, {**mine, "device": device}))
            report = compare(threshold, sorted(every, key=lambda m: m["rank"]), report)
            # Every rank holds the same report, so all take the same turn here.
            if timing == CONFIRM + 1 or not any(r.slow for r in report.ranks):
                break
            device = doctor.check_host(desc, probes, rounds, threshold, progress)
        if rank == 0:
            print(report.to_text(), file=out or sys.stdout, flush=True)
        if path == "-":
            print(report.to_json(rank), flush=True)
        elif path is not None:
            try:
                Path(path).write_text(report.to_json(rank) + "\n")
            except OSError as err:
                raise SftError(f"rank {rank}: cannot write {path}: {err.strerror or err}") from None
        # No rank exits before every rank has written: torchrun stops the others when one
        # exits with a nonzero status.
        _collective("waiting for the reports", rank, dist.barrier)
        return report
    finally:
        if created:
            dist.destroy_process_group()
