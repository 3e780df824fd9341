"""State written in place (`passes.output_storage`, `Target.state_in_place`): each value a call
replaces is written by IREE into a storage argument the caller passes (the buffer of the value before the
old one), never into the argument it reads (IREE 3.13 writes that before its last read:
test_iree_aliasing.py). Checked: the pass's signature, the compiled step's values against eager
over several steps, and that nothing the user holds is overwritten when buffers take turns."""

import dataclasses

import numpy as np
import torch
import torch.nn.functional as F

import sft
from sft import ir
from sft.passes.output_storage import OutputStoragePass
from sft.targets import get_target

# the host with its state written in place (off by default: not a gain on every program)
IN_PLACE = dataclasses.replace(get_target("host"), state_in_place=True)

STEP = """
func.func @main(%w: tensor<4xf32>, %g: tensor<4xf32>) -> (tensor<f32>, tensor<4xf32>) {
  %c = arith.constant 0.1 : f32
  %e = tensor.empty() : tensor<4xf32>
  %new = linalg.generic {indexing_maps = [affine_map<(i) -> (i)>, affine_map<(i) -> (i)>, affine_map<(i) -> (i)>],
                         iterator_types = ["parallel"]} ins(%w, %g : tensor<4xf32>, tensor<4xf32>) outs(%e : tensor<4xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %s = arith.mulf %c, %b : f32
    %d = arith.subf %a, %s : f32
    linalg.yield %d : f32
  } -> tensor<4xf32>
  %z = arith.constant dense<0.0> : tensor<f32>
  return %z, %new : tensor<f32>, tensor<4xf32>
}
"""


def test_the_pass_appends_one_storage_argument_per_replaced_result():
    module = ir.parse(ir.iree_ir.Context(), STEP, "step")
    OutputStoragePass("main", (1,))(module)
    text = ir.print_module(module)
    signature = next(line for line in text.splitlines() if "func.func @main" in line)
    # the two arguments as they were, then storage of result 1's type, marked for result 1
    assert signature.count("tensor<4xf32>") == 4, signature  # w, g, the storage, result 1
    assert "%arg2: tensor<4xf32> {iree.abi.output = 1 : index}" in signature, signature
    assert "iree.abi.output" not in signature.split("%arg2")[0]  # never on what the program reads


def test_a_training_step_writes_its_state_into_storage_and_matches_eager():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))
    ref = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))
    ref.load_state_dict(model.state_dict())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    ref_opt = torch.optim.AdamW(ref.parameters(), lr=1e-2)
    x, y = torch.randn(4, 8), torch.randint(0, 3, (4,))
    step = sft.compile_train_step(model, F.cross_entropy, opt, (x, y), target=IN_PLACE, keep_ir=True)
    assert "iree.abi.output" in step.stages.planned
    snapshots = []
    for i in range(5):
        loss = step(x, y)
        want = F.cross_entropy(ref(x), y)
        want.backward()
        ref_opt.step()
        ref_opt.zero_grad()
        np.testing.assert_allclose(float(loss), want.item(), rtol=1e-5)
        snapshots.append((step.state_dict(), {k: v.clone() for k, v in step.state_dict().items()}))
    for name, want in ref.state_dict().items():
        np.testing.assert_allclose(step.state_dict()[name].numpy(), want.numpy(), rtol=1e-5, atol=1e-6)
    # the buffers took turns under the state: what state_dict() gave stays what it was
    for held, copy in snapshots:
        for name in copy:
            assert torch.equal(held[name], copy[name]), name


def test_donated_jax_state_taking_turns_leaves_kept_results_alone():
    import jax
    import jax.numpy as jnp

    def step(w, x):
        loss = jnp.sum((x @ w) ** 2)
        return loss, w - 0.01 * jax.grad(lambda v: jnp.sum((x @ v) ** 2))(w)

    w, x = jnp.ones((4, 3)), jnp.arange(8.0).reshape(2, 4)
    compiled = sft.compile(step, (w, x), donate_argnums=(0,), target=IN_PLACE, keep_ir=True)
    assert "iree.abi.output" in compiled.stages.planned
    jitted = jax.jit(step)
    ours, ref, losses = w, w, []
    for _ in range(4):
        loss, ours = compiled(ours, x)
        losses.append((loss, float(loss)))
        want, ref = jitted(ref, x)
        np.testing.assert_allclose(float(loss), float(want), rtol=1e-5)
    np.testing.assert_allclose(np.asarray(ours), np.asarray(ref), rtol=1e-5)
    assert all(float(held) == value for held, value in losses)
