"""The plan space: which lowering decisions exist for a program, and which are legal."""
