"""SplitServe: split a node into target workers and DeepSpeed draft trainers.

Layers (docs/ARCHITECTURE.md, checked by tests/test_layers.py): `data` and `checkpoint` at the
bottom, `target` (the target side, shared with serving) above them, and the trainer (`config`,
`train`, `launch`, `workers`, `transport`, `topology`, `trainer`) on top; serving sits beside the
trainer and neither imports the other.
"""
