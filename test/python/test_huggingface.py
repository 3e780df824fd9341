"""Hugging Face models with their defaults (random weights from a small config: nothing is
downloaded): the default attention (`sdpa`) and, for the decoders, `use_cache=True`, whose
`DynamicCache` comes back in the output as eager returns it. Compared with eager: the output
class, every tensor leaf's values, dtype and shape."""

from __future__ import annotations

import pytest
import torch
from torch.utils._pytree import tree_flatten

import sft

transformers = pytest.importorskip("transformers")

IDS = torch.randint(0, 256, (2, 16), generator=torch.Generator().manual_seed(0))
SMALL = dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, intermediate_size=128)
MODELS = {
    "gpt2": lambda: (transformers.GPT2LMHeadModel(transformers.GPT2Config(
        n_layer=2, n_embd=64, n_head=4, vocab_size=256, n_positions=64)), (IDS,)),
    "bert": lambda: (transformers.BertModel(transformers.BertConfig(**SMALL, vocab_size=256)), (IDS,)),
    "llama": lambda: (transformers.LlamaForCausalLM(transformers.LlamaConfig(
        **SMALL, num_key_value_heads=2, vocab_size=256)), (IDS,)),
    "vit": lambda: (transformers.ViTModel(transformers.ViTConfig(**SMALL, image_size=32, patch_size=8)),
                    (torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(1)),)),
}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_default_model_matches_eager(name):
    torch.manual_seed(0)
    model, inputs = MODELS[name]()
    model.eval()
    assert model.config._attn_implementation == "sdpa"
    with torch.no_grad():
        want = model(*inputs)
    got = sft.compile(model, inputs)(*inputs)
    assert type(got) is type(want) and list(got.keys()) == list(want.keys())
    if "past_key_values" in want:  # use_cache=True: the cache is part of the output
        assert type(got.past_key_values) is type(want.past_key_values)
    got_leaves, want_leaves = tree_flatten(got)[0], tree_flatten(want)[0]
    assert len(got_leaves) == len(want_leaves)
    for g, w in zip(got_leaves, want_leaves):
        assert g.dtype == w.dtype and g.shape == w.shape
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)
