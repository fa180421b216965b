"""SplitServe trainer and runtime: split a node into target workers and DeepSpeed draft trainers.

Built so far: the target side (embedded target, hidden-state capture, loss masks). The trainer
itself lands with issue 3.
"""
