"""Data-parallel training steps (`compile_train_step(..., distributed=True)`, and DDP under
`torch.compile(backend="sft")`) on 2 local ranks with gloo, launched by torchrun as a user would: every rank ends with the same parameters and
optimizer state, equal to one process (PyTorch eager) training on the ranks' batches
concatenated; a rank that dies makes the other fail with one line, never hang."""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import sft
from sft.distributed.collective import Buckets, Link, allreduce_seconds, choose_buckets
from sft.errors import SftError

sys.path.insert(0, str(Path(__file__).parent))
from distributed_worker import CASES, batches, eager_steps  # noqa: E402

WORKER = Path(__file__).parent / "distributed_worker.py"
STEPS = 10
TIMEOUT = 600


def _torchrun(*args, ranks=2):
    return subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                           f"--nproc-per-node={ranks}", str(WORKER), *args],
                          capture_output=True, text=True, timeout=TIMEOUT)


def _eager(case: str, steps: int):
    """One process, PyTorch's own steps on the global batches: (model, optimizer, losses)."""
    build, make_opt, loss_fn, example, classes, options = CASES[case]
    torch.manual_seed(0)  # rank 0's seed: the data-parallel step starts from rank 0's model
    model = build()
    opt = make_opt(model.parameters())
    return model, opt, eager_steps(model, model, opt, loss_fn, options, batches(example, classes, steps))


@pytest.mark.parametrize("case", ["mlp", "gpt2_block"])
def test_two_ranks_match_one_process_on_the_whole_batch(case, tmp_path):
    proc = _torchrun(case, str(STEPS), str(tmp_path))
    assert proc.returncode == 0, proc.stderr[-3000:]
    ranks = [torch.load(tmp_path / f"rank{r}.pt", weights_only=False) for r in range(2)]
    model, opt, losses = _eager(case, STEPS)
    # every rank holds the same state: the same all-reduced gradients, the same update
    for name, value in ranks[0]["state"].items():
        assert torch.equal(value, ranks[1]["state"][name]), name
    for name, value in ranks[0]["optimizer"].items():
        assert torch.equal(value, ranks[1]["optimizer"][name]), name
    for name, want in model.state_dict().items():
        np.testing.assert_allclose(ranks[0]["state"][name].numpy(), want.detach().numpy(),
                                   rtol=1e-5, atol=1e-5, err_msg=name)
    # the global loss is the mean of the ranks' (equal shares, a mean loss)
    mean = np.mean([ranks[0]["losses"], ranks[1]["losses"]], axis=0)
    np.testing.assert_allclose(mean, losses, rtol=1e-5)
    times = ranks[0]["rank_times"]
    assert [t["rank"] for t in times] == [0, 1] and all(t["steps"] == STEPS for t in times)
    assert all(t["compute_s"] > 0 and t["communication_s"] > 0 for t in times)
    assert "predicted per step: compute" in ranks[0]["report"]
    assert all(r["resumed_same"] and r["resumed_plans"] for r in ranks)  # save / load_train_step


def test_ddp_under_torch_compile_with_the_sft_backend(tmp_path):
    """The user's DistributedDataParallel compiled by torch.compile(backend="sft"): Dynamo
    splits the graph at DDP's buckets, DDP's hooks all-reduce the gradients sft computes."""
    proc = _torchrun("mlp", str(STEPS), str(tmp_path), "--dynamo")
    assert proc.returncode == 0, proc.stderr[-3000:]
    ranks = [torch.load(tmp_path / f"rank{r}.pt", weights_only=False) for r in range(2)]
    model, _, losses = _eager("mlp", STEPS)
    for name, want in model.state_dict().items():
        assert torch.equal(ranks[0]["state"][name], ranks[1]["state"][name]), name
        np.testing.assert_allclose(ranks[0]["state"][name].numpy(), want.detach().numpy(),
                                   rtol=1e-5, atol=1e-5, err_msg=name)
    np.testing.assert_allclose(np.mean([ranks[0]["losses"], ranks[1]["losses"]], axis=0), losses,
                               rtol=1e-5)


def test_a_rank_that_dies_fails_the_others_in_one_line(tmp_path):
    """Rank 1 exits abruptly mid-run; rank 0's next all-reduce raises, it prints one line
    and exits 1. Launched without torchrun, whose agent would kill rank 0 itself."""
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port()),
           "WORLD_SIZE": "2"}
    procs = [subprocess.Popen([sys.executable, str(WORKER), "mlp", "6", str(tmp_path),
                               "--die-after", "2"], env={**env, "RANK": str(r)},
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for r in range(2)]
    outs = [p.communicate(timeout=TIMEOUT) for p in procs]
    assert procs[1].returncode == 3
    assert procs[0].returncode == 1, outs[0][1][-2000:]
    last = outs[0][1].strip().splitlines()[-1]
    assert last.startswith("sft: error: rank 0: the gradients' all-reduce failed"), last


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_outside_torchrun_distributed_is_one_line(monkeypatch):
    for var in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(var, raising=False)
    model = torch.nn.Linear(4, 2)
    with pytest.raises(SftError, match="torchrun"):
        sft.compile_train_step(model, torch.nn.functional.mse_loss,
                               torch.optim.SGD(model.parameters(), lr=0.1),
                               (torch.randn(2, 4), torch.randn(2, 2)), distributed=True)


def test_rank_times_needs_a_distributed_step():
    model = torch.nn.Linear(4, 2)
    step = sft.compile_train_step(model, torch.nn.functional.mse_loss,
                                  torch.optim.SGD(model.parameters(), lr=0.1),
                                  (torch.randn(2, 4), torch.randn(2, 2)))
    with pytest.raises(SftError, match="distributed=True"):
        step.rank_times()


def test_buckets_fill_in_reverse_order_up_to_the_cap():
    sizes = [400, 100, 300, 200, 1000]
    assert Buckets(500).assign(sizes) == ((4,), (3, 2), (1, 0))
    assert Buckets(10_000).assign(sizes) == ((4, 3, 2, 1, 0),)
    # a parameter over the cap is a bucket of its own
    assert Buckets(150).assign(sizes) == ((4,), (3,), (2,), (1,), (0,))


def test_the_model_prefers_fewer_buckets_when_nothing_overlaps():
    link = Link(50e-6, 1e9, "test")
    sizes = [4 << 20] * 20  # 80 MiB of gradients
    chosen = choose_buckets(sizes, 2, link)
    assert chosen.cap_bytes >= sum(sizes)
    assert chosen.predicted(sizes, 2, link) < Buckets(1 << 20).predicted(sizes, 2, link)
    # the ring's 2 (n-1)/n of the buffer through each link, plus the latency
    assert allreduce_seconds(1e9, 4, link) == pytest.approx(50e-6 + 1.5)
    assert allreduce_seconds(1e9, 1, link) == 0.0
