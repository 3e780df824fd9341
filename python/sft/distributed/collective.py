"""The gradients' all-reduce: how it is bucketed (a decision, `Buckets`), what it costs (the
link's latency and bandwidth, `Link`, measured on the live process group), and running it
through torch.distributed.

The cost of one all-reduce of `b` bytes over `n` ranks is the ring algorithm's: a latency, then
2 (n - 1) / n x b bytes through each rank's link (each rank sends and receives that much,
`allreduce_seconds`). `Link.bandwidth` is that "bus" bandwidth, as NCCL's tests report it.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

from ..errors import SftError

# Bus bandwidths and latencies from vendors' spec sheets, for planning only (never measured
# here): NVLink 4 on H100/H200 (450 GB/s each way per GPU), InfiniBand NDR (400 Gb/s per port).
SPEC_SHEET_LINKS = {
    "nvlink4": (3e-6, 450e9),
    "infiniband-ndr": (5e-6, 50e9),
}
# DDP's default bucket size (`bucket_cap_mb=25`).
DDP_BUCKET_BYTES = 25 << 20


@dataclass(frozen=True)
class Link:
    """What an all-reduce costs on a process group: seconds per call, and bus bandwidth."""

    latency: float      # seconds: an all-reduce of a few bytes
    bandwidth: float    # bytes/s through each rank's link (ring: 2 (n-1)/n x the buffer)
    source: str         # where the numbers come from

    @staticmethod
    def spec_sheet(name: str) -> "Link":
        """A link from `SPEC_SHEET_LINKS` (vendor figures, not measured)."""
        latency, bandwidth = SPEC_SHEET_LINKS[name]
        return Link(latency, bandwidth, f"{name} spec sheet (not measured)")


def allreduce_seconds(nbytes: float, ranks: int, link: Link) -> float:
    """Predicted seconds of one ring all-reduce of `nbytes` over `ranks` ranks."""
    if ranks <= 1:
        return 0.0
    return link.latency + 2.0 * (ranks - 1) / ranks * nbytes / link.bandwidth


@dataclass(frozen=True)
class Buckets:
    """The decision: gradients go to the all-reduce in buckets of at most `cap_bytes` (a
    parameter larger than that is a bucket of its own), filled in reverse parameter order as
    DDP fills them (the order the backward completes them). All buckets are issued together
    once the compiled gradient program returns: it is one program, so no gradient is ready
    before the others."""

    cap_bytes: int

    def assign(self, sizes: list[int]) -> tuple[tuple[int, ...], ...]:
        """Parameter indices per bucket, for parameters of `sizes` bytes."""
        buckets, current, filled = [], [], 0
        for i in reversed(range(len(sizes))):
            if current and filled + sizes[i] > self.cap_bytes:
                buckets.append(tuple(current))
                current, filled = [], 0
            current.append(i)
            filled += sizes[i]
        if current:
            buckets.append(tuple(current))
        return tuple(buckets)

    def predicted(self, sizes: list[int], ranks: int, link: Link) -> float:
        """Seconds of the all-reduces of every bucket, one after the other (gloo runs a
        group's collectives in order)."""
        return sum(allreduce_seconds(sum(sizes[i] for i in b), ranks, link)
                   for b in self.assign(sizes))


def choose_buckets(sizes: list[int], ranks: int, link: Link) -> Buckets:
    """The bucket size the cost model prefers among DDP's default, smaller and one bucket for
    everything. With every gradient ready at once nothing overlaps the all-reduces, so fewer
    buckets pay fewer latencies; ties go to the larger bucket."""
    options = [Buckets(1 << 20), Buckets(DDP_BUCKET_BYTES), Buckets(max(sum(sizes), 1))]
    return min(options, key=lambda b: (round(b.predicted(sizes, ranks, link), 9), -b.cap_bytes))


def measure_link(group=None, small: int = 1, large: int = 1 << 20, repeats: int = 9) -> Link:
    """The link's latency and bus bandwidth, measured on the live process group (every rank
    calls this): the median time of all-reduces of `small` and `large` float32 elements."""
    import torch
    import torch.distributed as dist

    ranks = dist.get_world_size(group)

    def median_seconds(elements: int) -> float:
        buffer = torch.zeros(elements, dtype=torch.float32)
        dist.all_reduce(buffer, group=group)  # warm-up: connections, buffers
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            dist.all_reduce(buffer, group=group)
            times.append(time.perf_counter() - start)
        # every rank must agree on the link: the slowest rank's median is the group's
        found = torch.tensor([statistics.median(times)], dtype=torch.float64)
        dist.all_reduce(found, op=dist.ReduceOp.MAX, group=group)
        return float(found)

    if ranks == 1:  # nothing moves: the all-reduce is skipped (`allreduce_mean`)
        return Link(0.0, float("inf"), "one rank: no communication")
    latency = median_seconds(small)
    moved = 2.0 * (ranks - 1) / ranks * large * 4
    bandwidth = moved / max(median_seconds(large) - latency, 1e-9)
    return Link(latency, bandwidth, f"measured on {dist.get_backend(group)} with {ranks} ranks")


def allreduce_mean(grads: list, buckets: tuple[tuple[int, ...], ...], group=None) -> list:
    """The mean over ranks of each gradient (torch tensors, in place of the list): each bucket
    flattened into one buffer and all-reduced asynchronously, all issued before any is waited
    for. A peer that exited or timed out is an SftError."""
    import torch
    import torch.distributed as dist

    ranks, rank = dist.get_world_size(group), dist.get_rank(group)
    if ranks == 1:
        return list(grads)
    issued = []
    for bucket in buckets:
        flat = torch.cat([grads[i].reshape(-1) for i in bucket])
        issued.append((bucket, flat, dist.all_reduce(flat, group=group, async_op=True)))
    out = list(grads)
    for k, (bucket, flat, work) in enumerate(issued):
        try:
            work.wait()
        except RuntimeError as err:  # gloo's DistBackendError is one
            # the group is broken (its peer is gone): destroyed, or torch aborts the process
            # at exit ("terminate called without an active exception"); the buckets still in
            # flight are waited out first (each fails too), not torn down under gloo's threads
            for _, _, pending in issued[k + 1:]:
                try:
                    pending.wait()
                except RuntimeError:
                    pass
            dist.destroy_process_group(group)
            raise SftError(f"rank {rank}: the gradients' all-reduce failed (a peer "
                           f"rank exited or timed out): {_first_line(err)}") from None
        flat /= ranks
        for i, piece in zip(bucket, flat.split([grads[i].numel() for i in bucket])):
            out[i] = piece.view(grads[i].shape)
    return out


def _first_line(err: BaseException) -> str:
    return next((line.strip() for line in str(err).splitlines() if line.strip()), type(err).__name__)[:200]
