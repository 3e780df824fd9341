"""sft beyond one process: data-parallel training steps on torch.distributed, the collective's
cost, and the slow rank found."""
