"""Switches like ``torch.backends.cudnn``: module attributes read at plan-selection time.

- ``benchmark``: time candidate plans on first use of a problem and cache the winner.
- ``deterministic``: only engines without the NONDETERMINISTIC note.
- ``allow_tf32``: float32 matmul/convolution may round inputs to TF32 on tensor cores.
- ``benchmark_limit``: at most this many candidates are timed (0 = all).
- ``workspace_limit``: plans needing more workspace bytes are skipped (None = no limit).
"""
benchmark: bool = False
deterministic: bool = False
allow_tf32: bool = False
benchmark_limit: int = 10
workspace_limit: int | None = None
