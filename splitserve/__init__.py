"""SplitServe trainer and runtime: split a node into target workers and DeepSpeed draft trainers.

The trainer lands with issue 3; today this package holds nothing but its place in the layout.
"""
