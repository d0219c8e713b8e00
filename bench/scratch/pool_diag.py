"""GPU diagnosis: avg_pool2d(3, 2, 1, ceil_mode=True, count_include_pad=False) backward."""
import torch
import torch.nn.functional as F

from opendnn.engines.pool import engine as E
from opendnn.torch import _graphs
from opendnn.torch import functional as P

orig = E._PoolBase._tiles
for tiles in (None, (32, 64, 4), (8, 128, 4), (1024, 1, 4)):
    E._PoolBase._tiles = orig if tiles is None else (
        lambda self, p, role, target, t=tiles: [E.PoolKnobs(*t)])
    _graphs.clear()
    for shape, cl in (((2, 256, 32, 32), True), ((2, 256, 32, 32), False),
                      ((1, 16, 12, 12), True), ((1, 16, 11, 11), True)):
        x = torch.randn(*shape, device="cuda")
        if cl:
            x = x.to(memory_format=torch.channels_last)
        xo, xr = x.clone().requires_grad_(), x.double().requires_grad_()
        kw = dict(ceil_mode=True, count_include_pad=False)
        y, yr = P.avg_pool2d(xo, 3, 2, 1, **kw), F.avg_pool2d(xr, 3, 2, 1, **kw)
        dy = torch.randn_like(y)
        y.backward(dy)
        yr.backward(dy.double())
        d = (xo.grad - xr.grad).abs()
        bad = (d > 1e-4).nonzero()
        names = [b.graph.get_plan_name_at_index(0) for b in _graphs._cache.values()]
        print(tiles, shape, cl, f"y {(y - yr).abs().max().item():.1e}",
              f"dx {d.max().item():.1e}", "bad", len(bad), bad[:3].tolist(), names[-1:])
