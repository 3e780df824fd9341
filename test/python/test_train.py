"""Compiled training steps (`sft.compile_train_step`): forward, loss, backward and the optimizer's
update as one program, state on the device, checked step by step against PyTorch's own steps."""

import copy
import re

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import sft
from sft.models import GPT2Block, MLP, ConvBlock

STEPS = 5


def _batches(example, classes, n=STEPS, seed=1):
    """`n` batches shaped like `example` (float inputs random, integer targets in range)."""
    g = torch.Generator().manual_seed(seed)
    return [tuple(torch.randn(b.shape, generator=g) if b.is_floating_point()
                  else torch.randint(0, classes, b.shape, generator=g) for b in example)
            for _ in range(n)]


def _eager(model, loss_fn, optimizer, batches):
    """PyTorch's own steps; returns the losses."""
    losses = []
    for *inputs, target in batches:
        loss = loss_fn(model(*inputs), target)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    return losses


def _close(got: dict, want: dict, rtol=1e-4):
    """Every tensor of `want` in `got`, within rtol, atol scaled to the tensor's magnitude."""
    assert set(want) <= set(got), set(want) - set(got)
    for name, ref in want.items():
        ref = ref.detach().double()
        atol = 1e-4 * max(ref.abs().max().item(), 1e-3)
        np.testing.assert_allclose(got[name].double().numpy(), ref.numpy(), rtol=rtol, atol=atol,
                                   err_msg=name)


def _check(build, make_opt, loss_fn, example, classes, search="none", keep_ir=False, plan=None):
    """Compile a step of `build()`, run it STEPS times beside PyTorch's steps on a copy; returns
    (step, user's model, its optimizer, reference model, reference optimizer)."""
    torch.manual_seed(0)
    model = build()
    ref = copy.deepcopy(model)
    opt, ref_opt = make_opt(model.parameters()), make_opt(ref.parameters())
    before = copy.deepcopy(model.state_dict())
    step = sft.compile_train_step(model, loss_fn, opt, example, search=search, keep_ir=keep_ir,
                                  plan=plan)
    batches = _batches(example, classes)
    losses = [step(*b) for b in batches]
    want = _eager(ref, loss_fn, ref_opt, batches)
    assert all(isinstance(l, torch.Tensor) and l.dim() == 0 for l in losses)
    np.testing.assert_allclose([l.item() for l in losses], want, rtol=1e-4, atol=1e-6)
    _close(step.state_dict(), ref.state_dict())
    # the user's model is untouched until sync
    for name, value in model.state_dict().items():
        assert torch.equal(value, before[name]), name
    return step, model, opt, ref, ref_opt


def _mlp():
    return MLP((32, 64, 10))


MLP_BATCH = (torch.randn(8, 32), torch.randint(0, 10, (8,)))
SGD = lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.9, dampening=0.1, weight_decay=1e-3)
ADAMW = lambda ps: torch.optim.AdamW(ps, lr=1e-2, weight_decay=0.05)


@pytest.fixture(scope="module")
def mlp_sgd():
    return _check(_mlp, SGD, F.cross_entropy, MLP_BATCH, 10, keep_ir=True)


def test_mlp_sgd_momentum_matches_torch(mlp_sgd):
    step, *_ = mlp_sgd
    assert step.steps == STEPS
    assert set(step.optimizer_state()) == {"step", *(f"momentum_buffer.{n}" for n, _ in _mlp().named_parameters())}


def test_step_ir_holds_no_weights(mlp_sgd):
    """Parameters are arguments: no constant in the IR as large as the smallest parameter holds
    values (splats, zeros to accumulate into, are no weights)."""
    step = mlp_sgd[0]
    smallest = min(p.numel() for p in _mlp().parameters())
    for text in (step.stages.linalg, step.stages.sft):
        for body, shape in re.findall(r"dense<([^>]*)>\s*:\s*tensor<([0-9x]*?)x?[a-z]\w*>", text):
            numel = int(np.prod([int(d) for d in shape.split("x")])) if shape else 1
            splat = "," not in body and not body.startswith('"0x')
            assert numel < smallest or splat, (shape, body[:40])


def test_sync_then_eager_continues(mlp_sgd):
    """sync() writes parameters and momentum buffers back: eager steps carry on from there."""
    step, model, opt, ref, ref_opt = mlp_sgd
    step.sync()
    _close(dict(model.state_dict()), ref.state_dict(), rtol=1e-6)
    more = _batches(MLP_BATCH, 10, n=2, seed=7)
    _eager(model, F.cross_entropy, opt, more)
    _eager(ref, F.cross_entropy, ref_opt, more)
    _close(dict(model.state_dict()), ref.state_dict())


def test_mlp_adamw_matches_torch_and_resumes():
    step, model, opt, ref, ref_opt = _check(_mlp, ADAMW, F.cross_entropy, MLP_BATCH, 10)
    assert float(step.optimizer_state()["step"]) == STEPS
    # a step compiled from the synced optimizer resumes its state (exp_avg, step count)
    step.sync()
    assert float(opt.state[next(iter(model.parameters()))]["step"]) == STEPS
    again = sft.compile_train_step(model, F.cross_entropy, opt, MLP_BATCH)
    assert again.steps == STEPS
    more = _batches(MLP_BATCH, 10, n=2, seed=9)
    np.testing.assert_allclose([again(*b).item() for b in more], _eager(ref, F.cross_entropy, ref_opt, more),
                               rtol=1e-4)
    _close(again.state_dict(), ref.state_dict())


def test_search_model_gives_the_same_numbers():
    searched = _check(_mlp, SGD, F.cross_entropy, MLP_BATCH, 10, search="model")[0]  # vs eager
    assert searched.search is not None


def _gpt_loss(logits, targets):
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten())


def test_gpt2_block_adamw_matches_torch():
    # eps=1e-6, not 1e-8: the key projection's bias has a zero gradient (softmax is invariant to
    # a shift along a row), so its gradient is rounding noise (~1e-10), which Adam with eps=1e-8
    # divides by its own size: any two correct implementations then differ at the scale of lr.
    opt = lambda ps: torch.optim.AdamW(ps, lr=1e-2, eps=1e-6, weight_decay=0.1)
    build = lambda: GPT2Block(vocab=64, dim=32, heads=2, max_len=16)
    example = (torch.randint(0, 64, (2, 8)), torch.randint(0, 64, (2, 8)))
    _check(build, opt, _gpt_loss, example, 64)


def test_cnn_train_mode_batch_norm_sgd_matches_torch():
    """Batch norm in train mode: batch statistics, and running statistics that the step updates."""
    build = lambda: torch.nn.Sequential(ConvBlock(3, 8), torch.nn.Linear(8, 5)).train()
    example = (torch.randn(4, 3, 8, 8), torch.randint(0, 5, (4,)))
    step = _check(build, lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, nesterov=True),
                  F.cross_entropy, example, 5)[0]
    assert int(step.state_dict()["0.bn.num_batches_tracked"]) == STEPS


def test_cnn_filter_gradients_as_matmuls_train_like_torch():
    """search="model" computes the step's filter gradients (windows larger than their outputs)
    as patch copies and matmuls (sft-im2col): the step still trains as PyTorch's does, and the
    plan says which convolutions it rewrote."""
    build = lambda: torch.nn.Sequential(ConvBlock(3, 8), torch.nn.Linear(8, 5)).train()
    example = (torch.randn(4, 3, 8, 8), torch.randint(0, 5, (4,)))
    step = _check(build, lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9),
                  F.cross_entropy, example, 5, search="model")[0]
    assert len(step.plan.im2col) == 2  # the stride-1 and the stride-2 convolution's


def test_a_packed_training_step_trains_like_torch():
    """Data tiling on a training step (from IREE's global optimization, `DATA_TILING`: its
    dispatch-creation path fails on every MLP step's weight gradient packed with its update):
    the plan of the search's packed option set, micro-kernels included, compiles as it is and
    trains as torch."""
    from sft.search.candidates import plan_of
    from sft.space.options import DATA_TILING, UKERNELS, ModuleOptions

    build = lambda: MLP((256, 1024, 256)).train()
    example = (torch.randn(32, 256), torch.randint(0, 256, (32,)))
    opt = lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.9)
    model = build()
    searched = sft.compile_train_step(model, F.cross_entropy, opt(model.parameters()), example,
                                      search="model")
    packed = plan_of(searched.search, ModuleOptions(data_tiling=True, ukernels=True))
    assert {DATA_TILING, UKERNELS} <= set(packed.flags) and not packed.groups
    _check(build, opt, F.cross_entropy, example, 256, plan=packed)


def test_wrong_batch_shape_is_an_error(mlp_sgd):
    """A smaller last batch: one line saying what to do."""
    with pytest.raises(sft.SftError, match=r"\(4, 32\).*not those the step was compiled for.*"
                                           r"\(8, 32\).*drop_last=True"):
        mlp_sgd[0](torch.randn(4, 32), torch.randint(0, 10, (4,)))


class SignSGD(torch.optim.SGD):
    """An SGD whose step() is its own: compiling torch's SGD in its place would train wrong."""

    def step(self, closure=None):
        for g in self.param_groups:
            for p in g["params"]:
                p.data.add_(p.grad.sign(), alpha=-g["lr"])


def _with_option(opt, key, value):
    opt.param_groups[0][key] = value
    return opt


def _hooked(opt):
    opt.register_step_pre_hook(lambda *a: None)
    return opt


@pytest.mark.parametrize("make, match", [
    (lambda m: torch.optim.RMSprop(m.parameters()), "RMSprop is not supported"),
    (lambda m: torch.optim.Adam(m.parameters(), amsgrad=True), "amsgrad"),
    (lambda m: SignSGD(m.parameters(), lr=0.1), "SignSGD subclasses torch.optim.SGD and defines step"),
    (lambda m: _with_option(torch.optim.SGD(m.parameters(), lr=0.1), "layer_decay", 0.5),
     "option 'layer_decay' is not one of torch.optim's"),
    (lambda m: _hooked(torch.optim.SGD(m.parameters(), lr=0.1)), "step hooks"),
])
def test_unsupported_optimizers_are_refused(make, match):
    model = _mlp()
    with pytest.raises(sft.SftError, match=match):
        sft.compile_train_step(model, F.cross_entropy, make(model), MLP_BATCH)


def _run(step, opt, sched, batches):
    """Compiled steps with `sched.step()` after each, as a training loop calls them."""
    for b in batches:
        step(*b)
        if sched is not None:
            sched.step()


def _eager_sched(model, loss_fn, opt, sched, batches):
    for *inputs, target in batches:
        loss_fn(model(*inputs), target).backward()
        opt.step()
        opt.zero_grad()
        if sched is not None:
            sched.step()


@pytest.mark.parametrize("make_opt, make_sched", [
    (SGD, lambda o: torch.optim.lr_scheduler.StepLR(o, step_size=2, gamma=0.3)),
    (ADAMW, lambda o: torch.optim.lr_scheduler.LambdaLR(o, lambda t: min(1.0, (t + 1) / 3))),
    (lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9),
     lambda o: torch.optim.lr_scheduler.OneCycleLR(o, max_lr=0.2, total_steps=STEPS + 1)),
])
def test_a_learning_rate_schedule_acts_on_the_compiled_step(make_opt, make_sched):
    """The hyper-parameters are inputs read at every call: a schedule (warm-up, decay, a
    momentum cycle) trains as it does in eager."""
    torch.manual_seed(0)
    model = _mlp()
    ref = copy.deepcopy(model)
    opt, ref_opt = make_opt(model.parameters()), make_opt(ref.parameters())
    sched, ref_sched = make_sched(opt), make_sched(ref_opt)
    step = sft.compile_train_step(model, F.cross_entropy, opt, MLP_BATCH)
    batches = _batches(MLP_BATCH, 10)
    _run(step, opt, sched, batches)
    _eager_sched(ref, F.cross_entropy, ref_opt, ref_sched, batches)
    _close(step.state_dict(), ref.state_dict())


def test_a_learning_rate_of_zero_leaves_the_parameters():
    model = _mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    step = sft.compile_train_step(model, F.cross_entropy, opt, MLP_BATCH)
    step(*MLP_BATCH)
    before = step.state_dict()
    opt.param_groups[0]["lr"] = 0.0
    step(*MLP_BATCH)
    for name, value in step.state_dict().items():
        assert torch.equal(value, before[name]), name


def test_parameter_groups_with_their_own_settings_match_torch():
    """The usual no-decay group for biases, with its own learning rate too."""
    def make_opt(model):
        decay = [p for n, p in model.named_parameters() if n.endswith("weight")]
        no_decay = [p for n, p in model.named_parameters() if n.endswith("bias")]
        return torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                                  {"params": no_decay, "weight_decay": 0.0, "lr": 3e-2}], lr=1e-2)

    torch.manual_seed(0)
    model = _mlp()
    ref = copy.deepcopy(model)
    opt, ref_opt = make_opt(model), make_opt(ref)
    step = sft.compile_train_step(model, F.cross_entropy, opt, MLP_BATCH)
    batches = _batches(MLP_BATCH, 10)
    _run(step, opt, None, batches)
    _eager_sched(ref, F.cross_entropy, ref_opt, None, batches)
    _close(step.state_dict(), ref.state_dict())
    step.sync()
    _close(dict(model.state_dict()), ref.state_dict())
    for p, q in zip(model.parameters(), ref.parameters()):
        _close(opt.state[p], {k: v for k, v in ref_opt.state[q].items()})


def test_a_change_of_the_updates_form_is_refused_at_the_call():
    model = _mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    step = sft.compile_train_step(model, F.cross_entropy, opt, MLP_BATCH)
    opt.param_groups[0]["momentum"] = 0.9
    with pytest.raises(sft.SftError, match=r"param_groups\[0\]: momentum_on changed"):
        step(*MLP_BATCH)


def test_eager_steps_after_sync_are_not_lost():
    """The compiled step carries on from what eager did after sync(), not from its own copy."""
    torch.manual_seed(0)
    model = _mlp()
    ref = copy.deepcopy(model)
    opt, ref_opt = SGD(model.parameters()), SGD(ref.parameters())
    step = sft.compile_train_step(model, F.cross_entropy, opt, MLP_BATCH)
    first, eager, last = (_batches(MLP_BATCH, 10, n=2, seed=s) for s in (1, 2, 3))
    _run(step, opt, None, first)
    step.sync()
    _eager(model, F.cross_entropy, opt, eager)  # the user's own steps, eager
    _run(step, opt, None, last)
    _eager(ref, F.cross_entropy, ref_opt, [*first, *eager, *last])
    _close(step.state_dict(), ref.state_dict())
    _close(step.optimizer_state(), {f"momentum_buffer.{n}": ref_opt.state[p]["momentum_buffer"]
                                    for n, p in ref.named_parameters()})


def test_weights_loaded_into_the_model_are_used_by_the_next_step():
    torch.manual_seed(0)
    model, other = _mlp(), _mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    step = sft.compile_train_step(model, F.cross_entropy, opt, MLP_BATCH)
    step(*MLP_BATCH)
    model.load_state_dict(other.state_dict())  # no sync: the model is the truth it changed
    step(*MLP_BATCH)
    ref_opt = torch.optim.SGD(other.parameters(), lr=0.1)
    _eager(other, F.cross_entropy, ref_opt, [MLP_BATCH])
    _close(step.state_dict(), other.state_dict())


class _Tied(torch.nn.Module):
    """A language model whose output head is its token embedding (as Hugging Face GPT-2)."""

    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(32, 16)
        self.mid = torch.nn.Linear(16, 16)
        self.head = torch.nn.Linear(16, 32, bias=False)
        self.head.weight = self.emb.weight

    def forward(self, x):
        return self.head(torch.tanh(self.mid(self.emb(x))))


class _Unused(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = torch.nn.Linear(32, 10), torch.nn.Linear(32, 10)

    def forward(self, x):
        return self.a(x)


class _TiedHalf(torch.nn.Module):
    """A classifier on an embedding tied to a head the loss never calls: the embedding trains
    under its other name."""

    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(32, 16)
        self.cls = torch.nn.Linear(16, 10)
        self.head = torch.nn.Linear(16, 32, bias=False)
        self.head.weight = self.emb.weight

    def forward(self, x):
        return self.cls(self.emb(x).mean(1))


class _Captured(torch.nn.Module):
    """A plain tensor attribute (no buffer): torch.export lifts it as a constant."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(32, 10)
        self.scale = torch.linspace(0.5, 2.0, 10)

    def forward(self, x):
        return self.lin(x) * self.scale


_TOKENS = (torch.randint(0, 32, (2, 5)), torch.randint(0, 32, (2, 5)))
_CLASS_WEIGHTS = torch.linspace(1.0, 3.0, 10)


@pytest.mark.parametrize("build, loss_fn, example, classes", [
    (_Tied, _gpt_loss, _TOKENS, 32),
    (_Unused, F.cross_entropy, MLP_BATCH, 10),
    (_TiedHalf, F.cross_entropy, (torch.randint(0, 32, (8, 5)), torch.randint(0, 10, (8,))), 10),
    (_Captured, F.cross_entropy, MLP_BATCH, 10),
    (_mlp, torch.nn.CrossEntropyLoss(weight=_CLASS_WEIGHTS), MLP_BATCH, 10),
    (_mlp, lambda out, t: F.cross_entropy(out, t, weight=_CLASS_WEIGHTS), MLP_BATCH, 10),
], ids=["tied-weights", "unused-parameter", "tied-alias-unused", "captured-attribute", "loss-module-weights",
        "loss-closure-weights"])
def test_the_loops_people_write_train_as_in_eager(build, loss_fn, example, classes):
    step, model, *_ = _check(build, SGD, loss_fn, example, classes)
    assert set(step.state_dict()) == set(model.state_dict())  # tied: under both names


def test_a_loss_returning_loss_and_aux_gives_both():
    def loss_fn(out, target):
        return F.cross_entropy(out, target), out.argmax(-1)

    torch.manual_seed(0)
    model = _mlp()
    ref = copy.deepcopy(model)
    step = sft.compile_train_step(model, loss_fn, SGD(model.parameters()), MLP_BATCH)
    loss, pred = step(*MLP_BATCH)
    ref_loss, ref_pred = loss_fn(ref(MLP_BATCH[0]), MLP_BATCH[1])
    np.testing.assert_allclose(loss.item(), ref_loss.item(), rtol=1e-5)
    assert pred.dtype == ref_pred.dtype and torch.equal(pred, ref_pred)


def test_a_mode_change_after_compiling_is_refused_at_the_call():
    model = torch.nn.Sequential(torch.nn.Linear(32, 10), torch.nn.BatchNorm1d(10)).train()
    step = sft.compile_train_step(model, F.cross_entropy, SGD(model.parameters()), MLP_BATCH)
    model.eval()
    with pytest.raises(sft.SftError, match="train/eval mode or which parameters require grad changed"):
        step(*MLP_BATCH)
    compiled = sft.compile(model, (MLP_BATCH[0],))
    model.train()
    with pytest.raises(sft.SftError, match="train/eval mode changed since it was compiled"):
        compiled(MLP_BATCH[0])


def test_adam_with_a_first_beta_over_a_half_matches_torch():
    """torch's lerp takes its other branch for weights of 0.5 and more (betas (0.0, 0.99))."""
    _check(_mlp, lambda ps: torch.optim.Adam(ps, lr=1e-2, betas=(0.3, 0.99)), F.cross_entropy,
           MLP_BATCH, 10)


@pytest.mark.parametrize("max_norm", [0.05, 100.0])  # clipped, and a norm that never clips
def test_gradient_clipping_inside_the_step_matches_clip_grad_norm(max_norm):
    torch.manual_seed(0)
    model = _mlp()
    ref = copy.deepcopy(model)
    opt, ref_opt = SGD(model.parameters()), SGD(ref.parameters())
    step = sft.compile_train_step(model, F.cross_entropy, opt, MLP_BATCH, max_grad_norm=max_norm)
    for batch in _batches(MLP_BATCH, 10, n=3):
        step(*batch)
        F.cross_entropy(ref(batch[0]), batch[1]).backward()
        torch.nn.utils.clip_grad_norm_(ref.parameters(), max_norm)
        ref_opt.step()
        ref_opt.zero_grad()
    _close(step.state_dict(), ref.state_dict())
    with pytest.raises(sft.SftError, match="max_grad_norm must be a positive number"):
        sft.compile_train_step(model, F.cross_entropy, opt, MLP_BATCH, max_grad_norm=-1)


# (no bias before the batch norm: its gradient is zero but for rounding, which Adam amplifies)
@pytest.mark.parametrize("make_model", [_mlp, lambda: torch.nn.Sequential(
    torch.nn.Linear(32, 16, bias=False), torch.nn.BatchNorm1d(16), torch.nn.Linear(16, 10)).train()])
def test_gradient_accumulation_matches_the_micro_batch_loop(make_model):
    """accumulation_steps=k: (loss / k).backward() on each of k chunks, then one clipped
    optimizer step, as the usual loop writes it; batch norm's statistics advance per chunk."""
    torch.manual_seed(0)
    model = make_model()
    ref = copy.deepcopy(model)
    opt, ref_opt = ADAMW(model.parameters()), ADAMW(ref.parameters())
    batch = (torch.randn(12, 32), torch.randint(0, 10, (12,)))
    step = sft.compile_train_step(model, F.cross_entropy, opt, batch, max_grad_norm=0.5,
                                  accumulation_steps=3)
    for x, y in _batches(batch, 10, n=3):
        loss = step(x, y)
        ref_loss = 0.0
        for xb, yb in zip(x.chunk(3), y.chunk(3)):
            micro = F.cross_entropy(ref(xb), yb) / 3
            micro.backward()
            ref_loss += micro.item()
        torch.nn.utils.clip_grad_norm_(ref.parameters(), 0.5)
        ref_opt.step()
        ref_opt.zero_grad()
        assert float(loss) == pytest.approx(ref_loss, rel=1e-5, abs=1e-6)
    _close(step.state_dict(), ref.state_dict())
    for bad, match in [(5, "must divide example_batch\\[0\\]'s first dimension"),
                       (0, "accumulation_steps must be a positive int")]:
        with pytest.raises(sft.SftError, match=match):
            sft.compile_train_step(model, F.cross_entropy, opt, batch, accumulation_steps=bad)


def test_a_saved_step_resumes_where_it_stopped(tmp_path):
    """step.save / sft.load_train_step: the checkpoint is torch's own state dicts and the plan;
    a fresh model and optimizer resume from it, and the two runs (through a save and without)
    end in the same state as eager's."""
    torch.manual_seed(0)
    model = _mlp()
    ref = copy.deepcopy(model)
    opt, ref_opt = ADAMW(model.parameters()), ADAMW(ref.parameters())
    step = sft.compile_train_step(model, F.cross_entropy, opt, MLP_BATCH, max_grad_norm=1.0)
    batches = _batches(MLP_BATCH, 10, n=4)
    for batch in batches[:2]:
        step(*batch)
    path = tmp_path / "step.pt"
    step.save(path)
    assert set(torch.load(path)["model"]) == set(model.state_dict())  # readable without sft
    fresh = _mlp()
    fresh_opt = ADAMW(fresh.parameters())
    resumed = sft.load_train_step(path, fresh, fresh_opt, F.cross_entropy)
    assert resumed.plan == step.plan and resumed.steps == 2
    for batch in batches[2:]:
        resumed(*batch)
    for batch in batches:
        F.cross_entropy(ref(batch[0]), batch[1]).backward()
        torch.nn.utils.clip_grad_norm_(ref.parameters(), 1.0)
        ref_opt.step()
        ref_opt.zero_grad()
    _close(resumed.state_dict(), ref.state_dict())
    (tmp_path / "junk.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(sft.SftError, match="junk.pt.*not a checkpoint sft can read"):
        sft.load_train_step(tmp_path / "junk.pt", fresh, fresh_opt, F.cross_entropy)
    wrong = MLP((32, 48, 10))
    with pytest.raises(sft.SftError, match="does not fit the checkpoint"):
        sft.load_train_step(path, wrong, ADAMW(wrong.parameters()), F.cross_entropy)


def test_counter_based_dropout_keeps_its_rate_and_repeats_per_seed():
    from sft.importers.dropout import uniform

    seed = torch.tensor(7, dtype=torch.int64)
    u = uniform(seed, 0, (200, 500))
    assert u.shape == (200, 500) and 0.0 <= u.min() and u.max() < 1.0
    assert abs((u >= 0.1).float().mean().item() - 0.9) < 0.005  # 10^5 draws: +-0.3% at 3 sigma
    assert torch.equal(u, uniform(seed, 0, (200, 500)))
    assert not torch.equal(u, uniform(seed, 1, (200, 500)))  # another site
    assert not torch.equal(u, uniform(seed + 1, 0, (200, 500)))  # another step


def _train_with_counter_masks(ref, batches):
    """Eager SGD steps of `ref` masking as a compiled step does, each step's seed drawn from
    torch's generator as the step draws it."""
    from sft.importers.dropout import counter_dropout, train_mode_dropouts

    opt = SGD(ref.parameters())
    with counter_dropout(train_mode_dropouts(ref, "ref")) as rng:
        for x, y in batches:
            rng.update(seed=torch.randint(0, 1 << 31, (), dtype=torch.int64), site=0)
            F.cross_entropy(ref(x), y).backward()
            opt.step()
            opt.zero_grad()


class _DropoutAttention(torch.nn.Module):
    """Attention whose weights drop out inside F.scaled_dot_product_attention, its p held by an
    nn.Dropout, as Hugging Face's default (sdpa) attention does."""

    def __init__(self):
        super().__init__()
        self.qkv, self.out, self.drop = torch.nn.Linear(16, 48), torch.nn.Linear(16, 10), torch.nn.Dropout(0.2)

    def forward(self, x):
        b, s, _ = x.shape
        q, k, v = (t.reshape(b, s, 2, 8).transpose(1, 2) for t in self.qkv(x).chunk(3, -1))
        h = F.scaled_dot_product_attention(q, k, v, dropout_p=self.drop.p if self.training else 0.0,
                                           is_causal=True)
        return self.out(h.transpose(1, 2).reshape(b, s, 16).mean(1))


def test_attention_dropout_trains_as_eager_with_the_same_masks():
    """sdpa's attention dropout gets the step's counter-based masks too (it was refused as a
    random op): the step equals eager masking the same way with the same seeds."""
    from sft.importers.dropout import _attention_math

    q, k, v = torch.randn(3, 2, 2, 5, 8).unbind(0)
    torch.testing.assert_close(_attention_math(q, k, v, None, True, None, False, lambda w: w),
                               F.scaled_dot_product_attention(q, k, v, is_causal=True))
    example = (torch.randn(4, 6, 16), torch.randint(0, 10, (4,)))
    batches = _batches(example, 10, n=3)
    torch.manual_seed(0)
    model = _DropoutAttention().train()
    ref = copy.deepcopy(model)
    step = sft.compile_train_step(model, F.cross_entropy, SGD(model.parameters()), example)
    torch.manual_seed(5)
    for batch in batches:
        step(*batch)
    torch.manual_seed(5)
    _train_with_counter_masks(ref, batches)
    _close(step.state_dict(), ref.state_dict())


def test_train_mode_dropout_trains_as_eager_with_the_same_masks():
    """The step's masks are those of `uniform` at the seed it draws from torch's generator: an
    eager model masking the same way, with the same seeds, ends in the same state; two runs
    from one torch seed are equal, and other dropout kinds are refused."""
    def make():
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Dropout(0.3),
                                   torch.nn.Linear(64, 10), torch.nn.Dropout(0.1)).train()

    def run(steps):
        model = make()
        step = sft.compile_train_step(model, F.cross_entropy, SGD(model.parameters()), MLP_BATCH)
        torch.manual_seed(123)
        for batch in steps:
            step(*batch)
        return step.state_dict()

    batches = _batches(MLP_BATCH, 10, n=3)
    got = run(batches)
    for name, value in run(batches).items():
        assert torch.equal(value, got[name]), name
    ref = make()
    torch.manual_seed(123)
    _train_with_counter_masks(ref, batches)
    _close(got, ref.state_dict())
    channel = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.Dropout2d(0.2)).train()
    with pytest.raises(sft.SftError, match="Dropout2d.*only nn.Dropout is compiled in train mode"):
        sft.compile_train_step(channel, lambda out, t: out.mean(), SGD(channel.parameters()),
                               (torch.randn(2, 3, 8, 8), torch.zeros(2)))


class _DataDependent(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 2)

    def forward(self, x):
        if (x > 0).all():  # decided on the data at trace time
            return self.linear(x)
        return self.linear(-x)


def test_data_dependent_python_is_one_line_naming_the_source_line():
    model = _DataDependent()
    with pytest.raises(sft.SftError, match=r"test_train.py:\d+: .*decides on a tensor's value.*"
                                           r"if \(x > 0\).all\(\):") as exc:
        sft.compile_train_step(model, F.mse_loss, torch.optim.SGD(model.parameters(), lr=0.1),
                               (torch.randn(3, 4), torch.randn(3, 2)))
    assert "\n" not in str(exc.value)


def test_cumulative_batch_norm_trains_as_eager():
    """BatchNorm(momentum=None) (a cumulative average: torch's forward reads
    1 / num_batches_tracked as a Python float) trains as eager."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.BatchNorm1d(16, momentum=None),
                                torch.nn.Linear(16, 3)).train()
    ref = copy.deepcopy(model)
    example = (torch.randn(6, 8), torch.randint(0, 3, (6,)))
    batches = _batches(example, 3, n=3)
    step = sft.compile_train_step(model, F.cross_entropy, SGD(model.parameters()), example)
    for batch in batches:
        step(*batch)
    opt = SGD(ref.parameters())
    for x, y in batches:
        F.cross_entropy(ref(x), y).backward()
        opt.step()
        opt.zero_grad()
    _close(step.state_dict(), ref.state_dict())
