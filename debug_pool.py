import math, torch, torch.nn.functional as F, opendnn.frontend as cudnn
from opendnn.enums import ResampleMode as M
torch.manual_seed(0)
res = []
for shape, w, s, p in [((4, 24, 14, 13), (12, 9), (2, 1), (3, 4)), ((4, 20, 7, 7), (7, 7), (1, 1), (0, 0)),
                       ((8, 3, 33, 47), (2, 2), (2, 2), (0, 0)), ((32, 64, 56, 56), (3, 3), (2, 2), (1, 1))]:
    for layout in ("nchw", "nhwc"):
        x = torch.randn(shape, device="cuda")
        if layout == "nhwc":
            x = x.to(memory_format=torch.channels_last)
        xr = x.double().requires_grad_(True)
        y = F.avg_pool2d(xr, w, s, p, count_include_pad=True)
        dy = torch.randn(y.shape, device="cuda")
        y.backward(dy.double())
        g = cudnn.pygraph()
        tdy = g.tensor_like(dy)
        tdx = g.resample_backward(tdy, M.AVGPOOL_INCLUDE_PADDING, list(w), list(s), padding=list(p))
        tdx.set_output(True).set_dim(list(x.shape)).set_stride(list(x.stride()))
        g.build([cudnn.heur_mode.A])
        dx = torch.full_like(x, float("nan"))
        ws = torch.empty(max(g.get_workspace_size(), 1), device="cuda", dtype=torch.uint8)
        g.execute({tdy: dy, tdx: dx}, ws)
        err = (dx.double() - xr.grad).abs()
        bad = (err > 1e-4).nonzero()
        print(shape, w, s, p, layout, g.get_plan_name_at_index(0), "maxerr", err.max().item(), "nbad", len(bad), bad[:4].tolist())
        if len(bad):
            i = tuple(bad[0].tolist())
            print("   got", dx[i].item(), "want", xr.grad[i].item())
