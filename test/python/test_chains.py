"""Chains of contractions: the orders they can run in, the branch and bound that picks one, and
the rewrite, checked against PyTorch."""

import math

import numpy as np
import pytest
import torch

import sft
from sft import ir
from sft.api import linalg_of
from sft.program import to_sft
from sft.cost.model import compute_floor
from sft.errors import IllegalPlan
from sft.models import SUITE
from sft.passes import ExpandBatchPass
from sft.passes.expand_batch import expandable
from sft.passes.reassociate import ReassociatePass
from sft.plan import Plan
from sft.search.chains import choose_order
from sft.space.chains import Chain, contraction_chains
from sft.space.kernels import contraction_kernels
from sft.targets import get_target

HOST = get_target("host")
SM90 = get_target("cuda:sm_90")

# R[i, l] = sum over j, k of A[i, j] B[j, k] C[k, l]: index ids i=0, l=1, j=2, k=3.
ABC = Chain(op_id=3, operands=((0, 2), (2, 3), (3, 1)), output=(0, 1), extents=(64, 16, 32, 256),
            element_bytes=4, written=((0, 1), 2))
# A 4-operand chain R[i, m] = A[i, j] B[j, k] C[k, l] D[l, m] with uneven sizes.
ABCD = Chain(op_id=5, operands=((0, 2), (2, 3), (3, 4), (4, 1)), output=(0, 1),
             extents=(48, 64, 512, 16, 256), element_bytes=4, written=(((0, 1), 2), 3))


def _trees(items):
    """Every binary tree over `items` (each unordered split once)."""
    if len(items) == 1:
        yield items[0]
        return
    first, rest = items[0], items[1:]
    for mask in range(1 << len(rest)):
        side = [first] + [r for b, r in enumerate(rest) if mask >> b & 1]
        other = [r for b, r in enumerate(rest) if not mask >> b & 1]
        if other:
            for a in _trees(side):
                for b in _trees(other):
                    yield (a, b)


def _step(k, target, cores):
    """A step's best predicted seconds by the target's own codegen."""
    codegen = target.codegen
    space = codegen.space(k)
    return float(codegen.predict(k, space.candidates, target.desc, cores, codegen.default(k, None)).min())


def _brute_force(chain, target=HOST, cores=1):
    return {t: sum(_step(k, target, cores) for k in map(chain.kernel, chain.steps(t)))
            for t in _trees(list(range(len(chain.operands)))) if chain.is_order(t)}


def _linear_attention():
    case = SUITE["linear_attention"]
    model, inputs = case.build(), case.inputs()
    with torch.no_grad():
        return model, inputs, model(*inputs).numpy()


def test_orders_and_their_work_by_hand():
    # (A B) C: 64*256*32 + 64*16*256; A (B C): 32*16*256 + 64*16*32; (A C) B sums nothing first.
    assert ABC.is_order(((0, 1), 2)) and ABC.is_order((0, (1, 2))) and not ABC.is_order(((0, 2), 1))
    assert not ABC.is_order((0, 1))  # not every operand
    assert ABC.flops(((0, 1), 2)) == 2 * (64 * 256 * 32 + 64 * 16 * 256)
    assert ABC.flops((0, (1, 2))) == 2 * (32 * 16 * 256 + 64 * 16 * 32)
    first, second = ABC.steps((0, (1, 2)))
    assert first.sources == (2, 1) and first.out == (1, 2)  # U[l, j] = sum_k C[k, l] B[j, k]
    assert second.sources == (0, 3) and second.out == (0, 1)


@pytest.mark.parametrize("target", ["host", "cuda:sm_80", "cuda:sm_90", "rocm:gfx942", "vulkan:rdna3"])
def test_lower_bound_never_exceeds_the_model(target):
    target = get_target(target)
    cores = 1 if target is HOST else target.desc.cores
    for chain in (ABC, ABCD):
        for tree, predicted in _brute_force(chain, target, cores).items():
            assert compute_floor(chain.flops(tree), target.desc, cores) <= predicted


@pytest.mark.parametrize("chain", [ABC, ABCD], ids=["3 operands", "4 operands"])
def test_dynamic_programming_agrees_with_brute_force_and_prunes(chain):
    brute = _brute_force(chain)
    choice = choose_order(chain, HOST, 1)
    assert choice.order == min(brute, key=brute.get)
    assert math.isclose(choice.predicted, brute[choice.order])
    assert math.isclose(choice.written_predicted, brute[chain.written])
    assert choice.orders == len(brute)  # every legal tree covered, counted
    assert choice.pruned > 0            # and some splits cut by their compute floor


def test_gpu_orders_follow_the_gpu_model_not_this_host():
    """On a GPU target every step is scored by the GPU's space and model (a chain as small as
    ABC is launch- and latency-bound there: every order ties, and as written wins): the choice
    is the brute force's under that model, counted over the GPU spaces."""
    big = Chain(op_id=3, operands=((0, 2), (2, 3), (3, 1)), output=(0, 1),
                extents=(4096, 64, 64, 4096), element_bytes=4, written=((0, 1), 2))
    brute = _brute_force(big, SM90, SM90.desc.cores)
    choice = choose_order(big, SM90, SM90.desc.cores)
    assert choice.order == min(brute, key=brute.get) == (0, (1, 2))  # A (B C): 64x less work
    assert math.isclose(choice.predicted, brute[choice.order]) and choice.predicted < choice.written_predicted
    assert math.isclose(choice.written_predicted, brute[big.written])
    kernels = {(s.lhs, s.rhs, s.out): big.kernel(s) for t in brute for s in big.steps(t)}
    assert choice.scored == sum(len(SM90.codegen.space(k)) for k in kernels.values())


def test_linear_attention_chain_is_found_and_reordered_with_the_same_numbers():
    model, inputs, expected = _linear_attention()
    module = to_sft(linalg_of(model, inputs)[0])
    (chain,) = contraction_chains(module)
    assert chain.flops(chain.written) / chain.flops((0, (1, 2))) == 256 / 16  # sequence / head dim
    compiled = sft.compile(model, inputs, plan=Plan(orders=((chain.op_id, (0, (1, 2))),)), keep_ir=True)
    assert "256x256xf32>" not in compiled.stages.planned  # no n x n scores
    np.testing.assert_allclose(compiled(*inputs).numpy(), expected, rtol=1e-4, atol=1e-5)


def test_model_search_picks_the_cheap_order():
    model, inputs, expected = _linear_attention()
    compiled = sft.compile(model, inputs, search="model")
    (choice,) = compiled.search.chains
    assert choice.order == (0, (1, 2)) and compiled.plan.orders == ((choice.chain.op_id, (0, (1, 2))),)
    assert "chain at op" in compiled.search.to_text()
    np.testing.assert_allclose(compiled(*inputs).numpy(), expected, rtol=1e-4, atol=1e-5)


def test_no_chain_when_the_intermediate_is_read_twice():
    class Twice(torch.nn.Module):
        def forward(self, a, b, c):
            t = a @ b
            return t @ c + t.sum()
    args = (torch.randn(8, 4), torch.randn(4, 8), torch.randn(8, 8))
    assert contraction_chains(to_sft(linalg_of(Twice(), args)[0])) == []
    # the 0-d sum broadcast back over t once crashed the raise (an empty permutation)
    np.testing.assert_allclose(sft.compile(Twice(), args, search="model")(*args).numpy(),
                               Twice()(*args).numpy(), rtol=1e-4, atol=1e-4)


def test_bad_orders_are_illegal_plans():
    model, inputs, _ = _linear_attention()
    text = ir.print_module(to_sft(linalg_of(model, inputs)[0]))
    (chain,) = contraction_chains(to_sft(text))
    for orders in (((chain.op_id, ((0, 2), 1)),), ((chain.op_id + 1, (0, (1, 2))),), ((chain.op_id, (0, 1)),)):
        with pytest.raises(IllegalPlan):
            ReassociatePass(orders)(to_sft(text))


def test_batch_expansion_then_reordering_composes():
    """Orders name ops in the program the expansion left; both rewrites together keep numbers."""
    model, inputs, expected = _linear_attention()
    module = to_sft(linalg_of(model, inputs)[0])
    expand = expandable(module)
    ExpandBatchPass(expand)(module)
    (chain,) = contraction_chains(module)
    assert chain.extents[:2] == (2, 4)  # batch and heads, no longer merged
    plan = Plan(expand=expand, orders=((chain.op_id, (0, (1, 2))),))
    assert Plan.from_json(plan.to_json()) == plan
    np.testing.assert_allclose(sft.compile(model, inputs, plan=plan)(*inputs).numpy(), expected,
                               rtol=1e-4, atol=1e-5)


def test_a_chain_of_three_matmuls_is_reordered_by_the_search():
    class Product(torch.nn.Module):
        def forward(self, a, b, c, d):
            return a @ b @ c @ d
    torch.manual_seed(0)
    args = (torch.randn(48, 64), torch.randn(64, 512), torch.randn(512, 16), torch.randn(16, 256))
    (chain,) = contraction_chains(to_sft(linalg_of(Product(), args)[0]))
    assert chain.written == (((0, 1), 2), 3) and len(chain.operands) == 4
    compiled = sft.compile(Product(), args, search="model", keep_ir=True)
    (choice,) = compiled.search.chains
    assert choice.order != chain.written and choice.predicted < choice.written_predicted
    expected = Product()(*args).numpy()
    # Another order rounds differently: the error scales with the magnitudes summed (~1e3 here).
    np.testing.assert_allclose(compiled(*args).numpy(), expected, rtol=1e-4,
                               atol=1e-5 * np.abs(expected).max())


def test_op_ids_run_across_functions_a_private_callee_included():
    """MLIR whose @main calls a private function holding a matmul, then runs a chain of three:
    the chain and the tiles are named by module-wide op ids, in the search, every pass and
    sft-lower alike (per function they disagreed, and the searched plan did not apply)."""
    from pathlib import Path

    text = (Path(__file__).parents[1] / "passes" / "op_ids.mlir").read_text()
    chains = contraction_chains(to_sft(text))
    assert [c.op_id for c in chains] == [7] and len(chains[0].operands) == 4
    rng = np.random.default_rng(0)
    args = [rng.standard_normal(s).astype(np.float32)
            for s in [(16, 32), (32, 64), (64, 8), (8, 128), (128, 4)]]
    want = args[0] @ args[1] @ args[2] @ args[3] @ args[4]
    searched = sft.compile(text, search="model")
    assert searched.plan.orders and searched.plan.orders[0][0] == 7
    np.testing.assert_allclose(searched(*args), want, rtol=1e-4, atol=1e-3)
    callee = next(k for k in contraction_kernels(to_sft(text)) if k.op_id == 1)
    tiled = sft.compile(text, plan=Plan(tiles=((1, HOST.codegen.space(callee).config(1)),)))
    np.testing.assert_allclose(tiled(*args), want, rtol=1e-4, atol=1e-3)
