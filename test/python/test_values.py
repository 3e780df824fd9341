"""What a compiled model returns: the dtypes, shapes and structure PyTorch returns, inputs updated
in place, the user's module left as it was; and inputs sft must refuse rather than get wrong."""

import numpy as np
import pytest
import torch

import sft


class Fn(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *args):
        return self.fn(*args)


def _same(got, want):
    """Equal structure, types, dtypes, shapes and (closely) values."""
    assert type(got) is type(want), (type(got), type(want))
    if isinstance(want, torch.Tensor):
        assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, got.shape, want.dtype, want.shape)
        tol = {torch.float16: 1e-3, torch.bfloat16: 1e-2}.get(want.dtype, 1e-6)
        torch.testing.assert_close(got, want, rtol=tol, atol=tol)
    elif isinstance(want, dict):
        assert list(got) == list(want)
        for k in want:
            _same(got[k], want[k])
    elif isinstance(want, (tuple, list)):
        assert len(got) == len(want)
        for g, w in zip(got, want):
            _same(g, w)
    else:
        assert got == want


CASES = {
    "f64": (lambda x: x * 2 + 1, lambda: (torch.randn(3, 4, dtype=torch.float64),)),
    "f16": (lambda x: x * 2, lambda: (torch.randn(3, 4, dtype=torch.float16),)),
    "bf16": (lambda x: x * 2 - 1, lambda: (torch.randn(3, 4, dtype=torch.bfloat16),)),
    "i64": (lambda x: x * 3, lambda: (torch.arange(5),)),
    "i32": (lambda x: x // 2, lambda: (torch.arange(-4, 5, dtype=torch.int32),)),
    "i8": (lambda x: x + 1, lambda: (torch.tensor([1, -7, 100], dtype=torch.int8),)),
    "bool": (lambda x: x > 0, lambda: (torch.randn(5),)),
    "0-d result": (lambda x: x.sum(), lambda: (torch.randn(3, 4),)),
    "0-d input": (lambda x: x.permute([]) * 2.0, lambda: (torch.tensor(3.0),)),
    "reshape to 0-d": (lambda x: x.reshape(()) * 2, lambda: (torch.randn(1, 1),)),
    "python scalar": (lambda x: (x.sum(), 3), lambda: (torch.randn(3, 4),)),
    "dict": (lambda x: {"b": x + 1, "a": (x * 2, x.mean())}, lambda: (torch.randn(3, 4),)),
    "namedtuple": (lambda x: x.sort(), lambda: (torch.randn(7),)),
    "cumsum (tm_tensor)": (lambda x: x.cumsum(0), lambda: (torch.randn(6, 2),)),
    "several dtypes": (lambda x, i: (x.double() * 2, i.argmax(), x > 0),
                       lambda: (torch.randn(4), torch.arange(4))),
}


@pytest.mark.parametrize("name", CASES)
def test_results_have_the_dtypes_shapes_and_structure_pytorch_returns(name):
    fn, inputs = CASES[name]
    args = inputs()
    model = Fn(fn)
    _same(sft.compile(model, args)(*args), model(*args))


def test_f64_arithmetic_stays_f64_on_a_long_reduction():
    # IREE's default f64 demotion gets this 0.5 off; torch-mlir computes var through f64.
    torch.manual_seed(0)
    x = torch.rand(2, 2, 512, 4096) + 100.0
    model = Fn(lambda x: torch.ops.aten.var(x, dim=[2, 3], correction=2))
    got, want = sft.compile(model, (x,))(x), model(x)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


def test_double_linear_compiles_and_matches():
    model = torch.nn.Linear(64, 32).double()
    x = torch.randn(2, 64, dtype=torch.float64)
    _same(sft.compile(model, (x,))(x), model(x))


def test_inputs_updated_in_place_are_updated():
    def bump(x):
        x.add_(1.0)
        return x * 2

    compiled = sft.compile(Fn(bump), (torch.zeros(3),))
    x = torch.zeros(3)
    out = compiled(x)
    assert torch.equal(x, torch.ones(3)) and torch.equal(out, torch.full((3,), 2.0))


def test_a_train_mode_module_computes_train_mode_outputs():
    """Batch statistics, as eager's train mode and torch.compile compute them; the running
    statistics are state the compiled model updates; the user's module keeps its mode."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.BatchNorm1d(6)).train()
    x = torch.randn(8, 4)
    compiled = sft.compile(model, (x,))
    assert model.training and all(m.training for m in model.modules())
    got, want = compiled(x), model(x)
    np.testing.assert_allclose(got.numpy(), want.detach().numpy(), rtol=1e-5, atol=1e-5)
    state = compiled.state_dict()
    for name in ("1.running_mean", "1.running_var"):
        np.testing.assert_allclose(state[name].numpy(), model.state_dict()[name].numpy(), rtol=1e-5)
    assert int(state["1.num_batches_tracked"]) == 1


def test_train_mode_dropout_is_refused_naming_eval():
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Dropout(0.5)).train()
    with pytest.raises(sft.SftError, match=r"'1' is Dropout\(p=0.5\) in train mode.*model.eval\(\)"):
        sft.compile(model, (torch.randn(2, 4),))
    assert model.training


def test_tanh_gelu_matches_the_exact_formula_better_than_torch_mlir_writes_it():
    x = torch.linspace(-4, 4, 1001)
    got = sft.compile(torch.nn.GELU(approximate="tanh"), (x,))(x).double().numpy()
    xs = x.double().numpy()
    exact = 0.5 * xs * (1 + np.tanh(np.sqrt(2 / np.pi) * (xs + 0.044715 * xs ** 3)))
    assert np.abs(got - exact).max() < 2e-6  # 0.797724 for sqrt(2/pi) is off by ~5e-4 here


U8 = lambda: torch.tensor([200, 3, 255, 0], dtype=torch.uint8)  # noqa: E731


@pytest.mark.parametrize("fn", [
    lambda x: x + 1,                                   # wraps: 255 + 1 = 0, as uint8
    lambda x: x.float() * 0.5,
    lambda x: x > 100,
    lambda x: torch.amax(x, 0),
    lambda x: (x.float() * 0.5).to(torch.uint8),
    lambda x: torch.where(x > 3, x, x * x),
])
def test_uint8_where_the_importer_is_right(fn):
    model, x = Fn(fn), U8()
    _same(sft.compile(model, (x,))(x), model(x))


@pytest.mark.parametrize("fn", [
    lambda x: x.sum(),                                 # torch-mlir widens as signed: 53, not 565
    lambda x: x // 3,                                  # torch-mlir crashes
    lambda x: x * 1.5,                                 # promoted as signed
    lambda x: x.max(),                                 # torch-mlir prints an error, then segfaults
])
def test_uint8_is_refused_where_the_importer_is_wrong(fn):
    with pytest.raises(sft.SftError, match="on uint8 is not supported"):
        sft.compile(Fn(fn), (U8(),))


def test_a_torch_mlir_crash_is_an_error_not_the_end_of_the_process():
    # int8 times a Python int: torch-mlir's lowering prints an error and segfaults
    with pytest.raises(sft.SftError, match="torch-mlir could not lower the model"):
        sft.compile(Fn(lambda x: x * 3), (torch.tensor([1, -2, 3], dtype=torch.int8),))


def test_numpy_inputs_give_numpy_results():
    compiled = sft.compile(Fn(lambda x: x.sum()), (torch.randn(3),))
    out = compiled(np.array([1.0, 2.0, 3.5], dtype=np.float32))
    assert isinstance(out, np.ndarray) and out.shape == () and out == 6.5


MULTI = """
func.func private @helper(%x: tensor<4xf32>) -> tensor<4xf32> {
  return %x : tensor<4xf32>
}
func.func @forward(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = call @helper(%x) : (tensor<4xf32>) -> tensor<4xf32>
  %1 = arith.addf %0, %0 : tensor<4xf32>
  return %1 : tensor<4xf32>
}
"""


def test_an_mlir_module_is_called_through_its_public_function():
    compiled = sft.compile(MULTI)
    assert compiled.input_specs == [((4,), np.dtype("float32"))]
    np.testing.assert_array_equal(compiled(np.arange(4, dtype=np.float32)), np.arange(4) * 2.0)


def test_ambiguous_entry_points_are_an_error():
    text = MULTI.replace("func.func private @helper", "func.func @helper")
    with pytest.raises(sft.SftError, match="ambiguous"):
        sft.compile(text)


def test_dynamic_shapes_are_refused_at_compile_time():
    text = """func.func @main(%x: tensor<?x4xf32>) -> tensor<?x4xf32> {
  return %x : tensor<?x4xf32>
}"""
    with pytest.raises(sft.SftError, match="dynamic shapes are not supported") as err:
        sft.compile(text)
    assert err.value.where.startswith("<input>:1:")


def test_unknown_target_is_an_error():
    with pytest.raises(sft.SftError, match="unknown target 'tpu'"):
        sft.compile(Fn(lambda x: x + 1), (torch.randn(2),), target="tpu")


def test_wrong_call_arguments_are_errors():
    compiled = sft.compile(Fn(lambda x: x + 1), (torch.randn(2),))
    with pytest.raises(sft.SftError, match="expected 1 inputs, got 2"):
        compiled(torch.randn(2), torch.randn(2))
    with pytest.raises(sft.SftError, match=r"input 0: expected float32\[2\], got float64\[2\]"):
        compiled(torch.randn(2, dtype=torch.float64))


FIVE_RESULTS = """
#id = affine_map<(d0) -> (d0)>
func.func @main(%a: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xi32>) {
  %e = tensor.empty() : tensor<4xf32>
  %ei = tensor.empty() : tensor<4xi32>
  %r:5 = linalg.generic {indexing_maps = [#id, #id, #id, #id, #id, #id], iterator_types = ["parallel"]}
      ins(%a : tensor<4xf32>) outs(%e, %e, %e, %e, %ei : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xi32>) {
  ^bb0(%x: f32, %o0: f32, %o1: f32, %o2: f32, %o3: f32, %o4: i32):
    %y = arith.addf %x, %x : f32
    %z = arith.mulf %x, %x : f32
    %i = arith.fptosi %x : f32 to i32
    linalg.yield %x, %y, %z, %y, %i : f32, f32, f32, f32, i32
  } -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xi32>)
  return %r#0, %r#1, %r#2, %r#3, %r#4 : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xi32>
}
"""


def test_an_op_with_more_results_than_opaque_slots_is_carried():
    x = np.arange(4, dtype=np.float32)
    outs = sft.compile(FIVE_RESULTS, search="model")(x)
    for got, want in zip(outs, (x, 2 * x, x * x, 2 * x, x.astype(np.int32))):
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)


def test_a_plain_torch_function_compiles_as_a_module():
    fn = lambda x, y: torch.tanh(x) @ y  # noqa: E731
    x, y = torch.randn(4, 8), torch.randn(8, 3)
    np.testing.assert_allclose(sft.compile(fn, (x, y))(x, y).numpy(), fn(x, y).numpy(), rtol=1e-5, atol=1e-6)


def test_a_bare_tensor_is_the_one_input_with_a_note():
    model, x = torch.nn.Linear(8, 3), torch.randn(4, 8)
    with pytest.warns(UserWarning, match=r"taken as the one input \(x,\)"):
        compiled = sft.compile(model, x)
    np.testing.assert_allclose(compiled(x).numpy(), model(x).detach().numpy(), rtol=1e-5, atol=1e-6)


def test_load_state_dict_strict_false_skips_unknown_names_as_torch_does():
    model, x = torch.nn.Linear(8, 3), torch.randn(4, 8)
    compiled = sft.compile(model, (x,))
    other = torch.nn.Linear(8, 3)
    keys = compiled.load_state_dict({**other.state_dict(), "extra": torch.zeros(1)}, strict=False)
    assert keys.unexpected_keys == ["extra"] and keys.missing_keys == []
    np.testing.assert_allclose(compiled(x).numpy(), other(x).detach().numpy(), rtol=1e-5, atol=1e-6)
    with pytest.raises(sft.SftError, match="unknown names"):
        compiled.load_state_dict({"extra": torch.zeros(1)})


def test_keyword_arguments_and_meta_tensors_are_one_line_errors():
    model, x = torch.nn.Linear(8, 3), torch.randn(4, 8)
    with pytest.raises(sft.SftError, match=r"keyword arguments \(input\) are not supported"):
        sft.compile(model, (x,))(input=x)
    with pytest.raises(sft.SftError, match="example input 0 is a meta tensor"):
        sft.compile(model, (torch.empty(4, 8, device="meta"),))
    with pytest.raises(sft.SftError, match="'weight' is a meta tensor"):
        sft.compile(torch.nn.Linear(8, 3, device="meta"), (x,))


def test_a_call_never_writes_into_its_inputs_nor_keeps_them():
    """IREE may write into an argument's buffer (a sort sorts in place: its input's buffer, when
    the caller's memory was lent to it) and return an argument unchanged: the caller's arrays
    reach IREE as copies, and what comes back or is kept is IREE's own."""
    import torch

    x = torch.randn(7)
    before = x.clone()
    values, indices = sft.compile(Fn(lambda v: v.sort()), (x,))(x)
    assert torch.equal(x, before)
    torch.testing.assert_close(values, before.sort().values)
    assert torch.equal(indices, before.sort().indices)

    v = np.arange(8, dtype=np.float32).reshape(2, 4)
    same, plus = sft.compile(lambda a: (a, a + 1), (v,))(v)
    assert not np.shares_memory(same, v)
    v[0, 0] = 100.0
    assert same[0, 0] == 0.0 and plus[0, 0] == 1.0

    class Last(torch.nn.Module):  # keeps its last input as a buffer
        def __init__(self):
            super().__init__()
            self.register_buffer("last", torch.zeros(2, 4))

        def forward(self, a):
            self.last.copy_(a)
            return a * 2

    first = torch.ones(2, 4)
    compiled = sft.compile(Last(), (first,))
    compiled(first)
    first.fill_(7.0)  # the caller's tensor changed after the call: the state must not follow
    np.testing.assert_array_equal(compiled.state_dict()["last"].numpy(), np.ones((2, 4), np.float32))
