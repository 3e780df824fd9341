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


def test_gpt2_fine_tuning_step_matches_eager():
    """The fine-tuning loop of examples/finetune_gpt2.py, 2 steps on a 1-layer GPT-2: padded
    batches under an attention mask (the mask code's data-dependent shortcut raised
    aten._local_scalar_dense), the LM head tied to the embedding, AdamW with a no-decay group,
    a warm-up schedule, clipping at 1.0, 2 micro-batches; parameters as eager's."""
    import copy

    import torch.nn.functional as F

    config = transformers.GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=64, n_positions=16,
                                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)

    class CausalLM(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.gpt2 = transformers.GPT2LMHeadModel(config)

        def forward(self, ids, mask):
            return self.gpt2(input_ids=ids, attention_mask=mask, use_cache=False).logits

    def loss_fn(logits, labels):
        return F.cross_entropy(logits[:, :-1].reshape(-1, 64), labels[:, 1:].reshape(-1), ignore_index=-100)

    def optimizer(model):
        groups = [{"params": [p for p in model.parameters() if p.dim() >= 2], "weight_decay": 0.01},
                  {"params": [p for p in model.parameters() if p.dim() < 2], "weight_decay": 0.0}]
        opt = torch.optim.AdamW(groups, lr=3e-3)
        return opt, torch.optim.lr_scheduler.LambdaLR(opt, lambda t: (t + 1) / 3)

    g = torch.Generator().manual_seed(2)
    batches = []
    for _ in range(2):
        ids = torch.randint(0, 64, (4, 16), generator=g)
        mask = (torch.arange(16) < torch.tensor([16, 12, 16, 9])[:, None]).long()
        batches.append((ids * mask, mask, torch.where(mask.bool(), ids, -100)))
    torch.manual_seed(0)
    model = CausalLM().train()
    ref = copy.deepcopy(model)
    opt, schedule = optimizer(model)
    step = sft.compile_train_step(model, loss_fn, opt, batches[0], max_grad_norm=1.0, accumulation_steps=2)
    for batch in batches:
        step(*batch)
        schedule.step()
    ref_opt, ref_schedule = optimizer(ref)
    for batch in batches:
        for ids, mask, labels in zip(*(t.chunk(2) for t in batch)):
            (loss_fn(ref(ids, mask), labels) / 2).backward()
        torch.nn.utils.clip_grad_norm_(ref.parameters(), 1.0)
        ref_opt.step()
        ref_opt.zero_grad()
        ref_schedule.step()
    got = step.state_dict()
    for name, want in ref.state_dict().items():
        if name in got:
            torch.testing.assert_close(got[name], want, rtol=1e-4, atol=1e-5)
    assert got["gpt2.lm_head.weight"].data_ptr() == got["gpt2.transformer.wte.weight"].data_ptr() \
        or torch.equal(got["gpt2.lm_head.weight"], got["gpt2.transformer.wte.weight"])
