"""The ``models`` benchmark family: whole networks in images/s.

ResNet-50 (torchvision's, random weights; examples/resnet.py where torchvision is
missing), 224x224, channels_last, five ways in the same run on the same inputs:

    pytorch eager     PyTorch with cuDNN (torch.backends.cudnn.benchmark on: cuDNN's best)
    inductor          torch.compile(model) (default backend and mode)
    opendnn eager     opendnn.torch.convert(model) (heuristic plans; backends.benchmark off)
    opendnn compile   torch.compile(model, backend="opendnn") (when opendnn.torch.compile
                      is importable)
    opendnn compile cudagraphs
                      torch.compile(model, backend="opendnn", mode="reduce-overhead"):
                      the same graphs replayed as CUDA graphs

Cases (``OPENDNN_BENCH_MODELS``, a comma list, picks some; default all):

    train     N=64, bf16 autocast (fp32 weights), SGD step (momentum 0.9): forward,
              cross entropy, backward, optimizer step
    infer64   N=64, bf16 weights and input, eval, no_grad
    infer1    N=1, the same (host-bound: every layer's launch cost shows)
    emonet    the EmoNet example (examples/emonet.py): N=32, 256x256, bf16,
              channels_last, eval, no_grad; PyTorch and opendnn each with their benchmark
              switch off, then on (opendnn's first call with it on finds; reported apart)

Each row: ms per step (median of REPEATS runs of ITERS steps, CUDA events), images/s, the
ratio to PyTorch eager (``ratio``, > 1 = faster) and to inductor (``inductor_ratio``),
TFLOP/s from counted convolution and linear FLOPs (training: 3x the forward), and the
warm-up's wall time (``warmup_s``: the first WARMUP steps, where Triton kernels and
inductor's code compile; ResNet-50's many shapes can take minutes) measured apart from
the timing. Targets: opendnn >= 1.0x PyTorch eager for training, >= 1.1x for
inference.
"""

from __future__ import annotations

import copy
import importlib.util
import os
import statistics
import time

import torch
import torch.nn as nn

CL = torch.channels_last
DEVICE = "cuda"
SIZE, CLASSES = 224, 1000
CASES = {"train": ("train", 64), "infer64": ("infer", 64), "infer1": ("infer", 1)}
ITERS = {"train": 10, "infer": 20}
REPEATS = 5
WARMUP = 3
EMONET_BATCH, EMONET_ITERS, EMONET_SIZE, EMONET_WIDTH = 32, 20, 256, 64
EXAMPLES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "examples")


def _example(name: str):
    path = os.path.join(EXAMPLES, f"{name}.py")
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path}: the models bench runs from a source checkout")
    spec = importlib.util.spec_from_file_location(f"opendnn_example_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def resnet50() -> tuple[nn.Module, str]:
    """(float32 ResNet-50 on the GPU, where it comes from), seeded."""
    torch.manual_seed(0)
    if importlib.util.find_spec("torchvision") is not None:
        import torchvision

        return torchvision.models.resnet50().to(DEVICE), "torchvision"
    return _example("resnet").resnet50().to(DEVICE), "examples/resnet.py"


def forward_flops(model: nn.Module, x: torch.Tensor) -> float:
    """2 x the multiply-adds of every Conv2d and Linear in one forward of ``x``, per image."""
    total = [0]

    def count(m, inputs, out):
        if isinstance(m, nn.Conv2d):
            total[0] += (
                out.numel() * (m.in_channels // m.groups) * m.kernel_size[0] * m.kernel_size[1]
            )
        elif isinstance(m, nn.Linear):
            total[0] += out.numel() * m.in_features

    hooks = [
        m.register_forward_hook(count)
        for m in model.modules()
        if isinstance(m, (nn.Conv2d, nn.Linear))
    ]
    training = model.training
    model.eval()  # running statistics stay as they are
    with torch.no_grad():
        model(x)
    model.train(training)
    for h in hooks:
        h.remove()
    return 2.0 * total[0] / x.shape[0]


def _compile_backend_available() -> bool:
    try:
        return importlib.util.find_spec("opendnn.torch.compile") is not None
    except ModuleNotFoundError:
        return False


def variants(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """The ways to run ``model`` (each on its own copy), opendnn's last: PyTorch eager,
    inductor, opendnn eager (converted), opendnn's compile backend, and the backend's
    "reduce-overhead" mode (CUDA graphs)."""
    import opendnn.torch as odt

    out = [("pytorch eager", copy.deepcopy(model))]
    torch._dynamo.reset()
    out.append(("inductor", torch.compile(copy.deepcopy(model))))
    out.append(("opendnn eager", odt.convert(copy.deepcopy(model))))
    if _compile_backend_available():
        importlib.import_module("opendnn.torch.compile")  # registers backend "opendnn"
        out.append(("opendnn compile", torch.compile(copy.deepcopy(model), backend="opendnn")))
        out.append(
            (
                "opendnn compile cudagraphs",
                torch.compile(copy.deepcopy(model), backend="opendnn", mode="reduce-overhead"),
            )
        )
    return out


def _time_ms(step, iters: int) -> float:
    """Median over REPEATS of the mean ms per ``step()`` across ``iters`` calls."""
    samples = []
    for _ in range(REPEATS):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            step()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) / iters)
    return statistics.median(samples)


def _warm(step) -> float:
    """Seconds of the first WARMUP steps (compiles happen here), synchronized."""
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(WARMUP):
        step()
    torch.cuda.synchronize()
    return time.perf_counter() - t0


def _steps(mode: str, model: nn.Module, x: torch.Tensor, target: torch.Tensor):
    """A zero-argument callable running one step of ``mode`` on ``model``."""
    if mode == "infer":
        model.eval()

        def infer():
            with torch.no_grad():
                model(x)

        return infer
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def train():
        with torch.autocast(DEVICE, dtype=torch.bfloat16):
            loss = nn.functional.cross_entropy(model(x), target)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    return train


def run_resnet(r, case: str) -> None:
    """One ResNet-50 case: every variant warmed up, then timed; rows vs PyTorch eager."""
    import opendnn.torch as odt

    mode, n = CASES[case]
    base, origin = resnet50()
    base = base.to(memory_format=CL)
    if mode == "infer":
        base = base.to(torch.bfloat16)
    x = torch.randn(
        n, 3, SIZE, SIZE, device=DEVICE, dtype=torch.bfloat16 if mode == "infer" else torch.float32
    )
    x = x.contiguous(memory_format=CL)
    target = torch.randint(0, CLASSES, (n,), device=DEVICE)
    flops = forward_flops(base, x[:1]) * n * (3 if mode == "train" else 1)
    tag = f"resnet50 {case} N={n} {SIZE}x{SIZE} {'bf16-autocast' if mode == 'train' else 'bf16'} cl"
    odt.clear_fallbacks()
    timed = {}
    for name, model in variants(base):
        step = _steps(mode, model, x, target)
        warm = _warm(step)
        ms = _time_ms(step, ITERS[mode])
        timed[name] = (ms, warm)
        print(
            f"  {tag}: {name:15s} {ms:9.3f} ms ({n / ms * 1e3:8.1f} images/s), "
            f"warm-up {warm:6.1f} s",
            flush=True,
        )
        del model, step
        torch.cuda.empty_cache()
    eager_ms, inductor_ms = timed["pytorch eager"][0], timed["inductor"][0]
    for name, (ms, warm) in timed.items():
        r.add(
            "models",
            f"{tag} {name}",
            ms,
            eager_ms,
            flops=flops,
            ref_name="pytorch eager",
            source=origin,
            images_per_s=n / ms * 1e3,
            inductor_ms=inductor_ms,
            inductor_ratio=inductor_ms / ms,
            warmup_s=warm,
        )
    fell_back = odt.fallbacks()
    if fell_back:
        r.meta.setdefault("models_fallbacks", {})[case] = {
            f"{k[0]}: {k[1]}": v for k, v in fell_back.items()
        }
        print(f"  opendnn fell back to PyTorch: {fell_back}")


def run_emonet(r) -> None:
    """The EmoNet benchmark: benchmark switch off, then on, PyTorch and opendnn."""
    import opendnn.torch as odt

    from .. import backends

    emonet = _example("emonet")
    torch.manual_seed(0)
    base = emonet.EmoNet(n_expression=8, width=EMONET_WIDTH, input_size=EMONET_SIZE)
    base = base.to(DEVICE, torch.bfloat16).to(memory_format=CL).eval()
    x = torch.randn(EMONET_BATCH, 3, EMONET_SIZE, EMONET_SIZE, device=DEVICE, dtype=torch.bfloat16)
    x = x.contiguous(memory_format=CL)
    flops = forward_flops(base, x[:1]) * EMONET_BATCH
    model = odt.convert(copy.deepcopy(base))
    saved = torch.backends.cudnn.benchmark
    odt.clear_fallbacks()
    timed = {}
    for name, m, switch in (("pytorch", base, "cudnn"), ("opendnn", model, "opendnn")):
        for on in (False, True):
            if switch == "cudnn":
                torch.backends.cudnn.benchmark = on
            else:
                backends.benchmark = on

            def step():
                with torch.no_grad():
                    m(x)

            torch.cuda.synchronize()
            t0 = time.perf_counter()
            step()  # first call (opendnn: compiles; finds)
            torch.cuda.synchronize()
            first = time.perf_counter() - t0
            warm = _warm(step)
            timed[(name, on)] = (_time_ms(step, EMONET_ITERS), first, warm)
    backends.benchmark = False
    torch.backends.cudnn.benchmark = saved
    for (name, on), (ms, first, warm) in timed.items():
        ref_ms = timed[("pytorch", on)][0]
        r.add(
            "models",
            f"emonet N={EMONET_BATCH} {EMONET_SIZE}x{EMONET_SIZE} bf16 cl eval {name} "
            f"benchmark={'on' if on else 'off'}",
            ms,
            ref_ms,
            flops=flops,
            ref_name=f"pytorch benchmark={'on' if on else 'off'}",
            images_per_s=EMONET_BATCH / ms * 1e3,
            first_call_s=first,
            warmup_s=warm,
            vs_benchmark_off=timed[(name, False)][0] / ms,
        )
    if odt.fallbacks():
        r.meta.setdefault("models_fallbacks", {})["emonet"] = {
            f"{k[0]}: {k[1]}": v for k, v in odt.fallbacks().items()
        }


def run_models(r, bench=None) -> None:
    """Entry point of the family (``bench``, the runner's timer, is not used: whole
    steps are timed with CUDA events over ITERS steps)."""
    chosen = os.environ.get("OPENDNN_BENCH_MODELS", "train,infer64,infer1,emonet")
    cases = [c.strip() for c in chosen.split(",") if c.strip()]
    unknown = [c for c in cases if c not in CASES and c != "emonet"]
    if unknown:
        raise ValueError(
            f"OPENDNN_BENCH_MODELS: unknown cases {unknown} "
            f"(known: {', '.join(list(CASES) + ['emonet'])})"
        )
    saved = torch.backends.cudnn.benchmark
    torch.backends.cudnn.benchmark = True
    r.meta["models"] = {
        "cudnn_benchmark": True,
        "size": SIZE,
        "iters": ITERS,
        "repeats": REPEATS,
        "warmup_steps": WARMUP,
        "opendnn_compile_backend": _compile_backend_available(),
    }
    try:
        for case in cases:
            if case == "emonet":
                run_emonet(r)
            else:
                run_resnet(r, case)
    finally:
        torch.backends.cudnn.benchmark = saved
