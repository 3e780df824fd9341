"""Plans: fusion groups become dispatch regions, tiles become compilation_info, both replay."""

import numpy as np
import pytest
import torch

import sft
from sft.errors import IllegalPlan
from sft.models import SUITE
from sft.api import linalg_of
from sft.program import to_sft
from sft.passes.expand_batch import expandable
from sft.decisions import TileConfig
from sft.plan import Plan

MLP_TILES = TileConfig((8, 64, 0), (8, 16, 0), (0, 0, 16))


def test_plan_json_roundtrip_and_hash():
    plan = Plan(orders=((30, (0, (1, 2))),), groups=((0, 1, 2, 3),), tiles=((2, MLP_TILES),),
                flags=("--iree-opt-data-tiling",))
    again = Plan.from_json(plan.to_json())
    assert again == plan and hash(again) == hash(plan) and again.digest() == plan.digest()
    assert Plan().is_empty and not plan.is_empty


def test_a_plan_is_its_decision_kinds():
    """Plan's fields, JSON, passes and report words all come from plan.KINDS: one entry per
    kind, in the order the kinds apply; keywords only."""
    import dataclasses
    import pickle

    from sft.decisions.kind import IREE, SFT
    from sft.passes.apply_plan import ApplyTilesPass, FusionGroupsPass
    from sft.passes.expand_batch import ExpandBatchPass
    from sft.passes.im2col import Im2colPass
    from sft.passes.low_precision import LowPrecisionPass
    from sft.passes.orient import OrientPass
    from sft.passes.reassociate import ReassociatePass
    from sft.passes.hold_packed import HoldPackedPass
    from sft.passes.hold_transposed import HoldTransposedPass
    from sft.passes.split_batch import SplitBatchPass
    from sft.passes.split_reduction import SplitReductionPass
    from sft.plan import KINDS

    assert [f.name for f in dataclasses.fields(Plan)] == [k.field for k in KINDS]
    assert Plan().to_json() == "{}" and Plan().passes(SFT) == [] and Plan().describe() == []
    with pytest.raises(TypeError):
        Plan((1,))  # keywords only
    every = Plan(batch_split=(2, 3), weight_split=(2, 0, 1), im2col=(6,), split=(7,), held=(1,), orient=(5,), expand=(4,), orders=((3, (0, (1, 2))),), low_precision=((2, "bf16"),),
                 tiles=((2, MLP_TILES),), packed=((1, 8, 32),), groups=((0, 1),), flags=("--x",), driver="local-sync",
                 as_imported=True)
    assert not any(getattr(every, k.field) == k.default for k in KINDS)
    assert Plan.from_json(every.to_json()) == every == pickle.loads(pickle.dumps(every))
    assert [type(p) for p in every.passes(SFT)] == [SplitBatchPass, SplitBatchPass, Im2colPass, SplitReductionPass,
                                                    HoldTransposedPass, OrientPass, ExpandBatchPass,
                                                    ReassociatePass, LowPrecisionPass]
    assert [type(p) for p in every.passes(IREE)] == [ApplyTilesPass, HoldPackedPass, FusionGroupsPass]
    assert every.describe() == ["batch in 2 parts side by side", "weights in 2 parts side by side", "im2col ops [6]", "split sums [7]", "parameters [1] held transposed", "oriented ops [5]", "batch expanded on ops [4]", "chains reordered: op 3 as (0, (1, 2))",
                                "bf16 inputs, f32 accumulation on ops [2]", "parameters [1] held packed (8x32 blocks)"]
    with pytest.raises(sft.SftError, match="unknown key 'tile' .known: as_imported, batch_split, driver, expand, flags, groups, held"):
        Plan.from_json('{"tile": []}')
    with pytest.raises(sft.SftError, match=r"low_precision\[0\]: \"f8\" is not a low-precision"):
        Plan.from_json('{"low_precision": [[2, "f8"]]}')


def test_groups_and_tiles_change_the_program_not_the_numbers():
    case = SUITE["mlp"]
    model, inputs = case.build(), case.inputs()
    plan = Plan(groups=((0, 1, 2, 3), (4,), (5, 6, 7, 8)), tiles=((2, MLP_TILES),))
    compiled = sft.compile(model, inputs, plan=plan, keep_ir=True)
    assert compiled.stages.planned.count("flow.dispatch.region") == 3
    assert "compilation_info" in compiled.stages.planned
    default = sft.compile(model, inputs)
    assert compiled.dispatch_count != default.dispatch_count  # the partition was imposed
    with torch.no_grad():
        expected = model(*inputs).numpy()
    np.testing.assert_allclose(compiled(*inputs).numpy(), expected, rtol=1e-4, atol=1e-5)


def test_plan_naming_missing_op_is_illegal():
    case = SUITE["linear"]
    with pytest.raises(IllegalPlan, match="does not have"):
        sft.compile(case.build(), case.inputs(), plan=Plan(groups=((0, 99),)))


def test_non_convex_group_is_illegal():
    case = SUITE["mlp"]
    # op 2 (first matmul) and op 7 (second matmul) without what lies between them
    with pytest.raises(IllegalPlan, match="not convex"):
        sft.compile(case.build(), case.inputs(), plan=Plan(groups=((2, 7),)))


def test_batch_expansion_lets_iree_fold_head_transposes_with_the_same_numbers():
    case = SUITE["gpt2_block"]
    model, inputs = case.build(), case.inputs()
    ids = expandable(to_sft(linalg_of(model, inputs)[0]))
    assert len(ids) == 2  # q k^T and p v, each over heads merged into the batch
    default = sft.compile(model, inputs)
    expanded = sft.compile(model, inputs, plan=Plan(expand=ids))
    assert expanded.dispatch_count == default.dispatch_count - 4  # the head transposes folded in
    with torch.no_grad():
        expected = model(*inputs).numpy()
    np.testing.assert_allclose(expanded(*inputs).numpy(), expected, rtol=1e-4, atol=1e-5)
    searched = sft.compile(model, inputs, search="model")
    if searched.plan.batch_split or searched.plan.weight_split:  # the part's search is the report
        from sft.api import prepare
        from sft.passes.split_batch import split_of
        from sft.search.batch_split import part_text

        ids = expandable(to_sft(part_text(prepare(model, inputs)[0], split_of(searched.plan))))
    assert {"as written", f"expanded {list(ids)}"} <= set(searched.search.rewrites)
    assert searched.plan.expand in ((), ids) and "rewrites:" in searched.search.to_text()


def test_a_plan_as_imported_is_iree_alone_on_the_front_ends_linalg_and_verify_times_it():
    """IREE's compile of the import as it came is one of verify's candidates, so that sft's own
    raise and lower can never cost the user (a JAX step once ran 0.53x IREE alone that way)."""
    plan = Plan(as_imported=True, driver="local-sync")
    assert Plan.from_json(plan.to_json()) == plan and not plan.is_empty
    assert "as_imported" not in Plan().to_json()  # plans without it hash as they did
    case = SUITE["mlp"]
    model, inputs = case.build(), case.inputs()
    alone = sft.compile(model, inputs, plan=plan, keep_ir=True)
    assert alone.stages.planned == alone.stages.linalg
    with torch.no_grad():
        expected = model(*inputs).numpy()
    np.testing.assert_allclose(alone(*inputs).numpy(), expected, rtol=1e-4, atol=1e-5)
    verified = sft.compile(model, inputs, search="verify")
    assert verified.search.measured.get("program iree-import") is not None
    np.testing.assert_allclose(verified(*inputs).numpy(), expected, rtol=1e-4, atol=1e-5)
    with pytest.raises(sft.SftError, match="as_imported must be true or false"):
        Plan.from_json('{"as_imported": 1}')
