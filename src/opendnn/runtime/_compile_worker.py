"""A Triton compile worker: reads jobs (one JSON object per line) on stdin, compiles each
into Triton's on-disk cache, answers one JSON line per job on stdout.

Run by file path (``python _compile_worker.py``), never as part of the ``opendnn``
package: it imports only Triton, so it starts in a fraction of a second, and it touches
no GPU (Triton compiles for a target named in the job). A job is

    {"path": kernel source file, "name": JIT function, "spec": Triton's specialization
     data (JSON, as ``JITFunction`` hands its cache hooks), "arch": 90, "warp": 32}

and the answer {"ok": true, "hash": Triton's cache key of the kernel} or {"error":
"<traceback>"}. The parent then asks Triton for
the same kernel, and Triton finds it in the cache.
"""

import importlib.util
import json
import os
import sys
import traceback

os.environ["TRITON_INTERPRET"] = "0"  # the kernel modules must decorate for compiling

import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource, make_backend  # noqa: E402

_modules: dict = {}


def _function(path: str, name: str):
    mod = _modules.get(path)
    if mod is None:
        spec = importlib.util.spec_from_file_location(f"opendnn_worker_{len(_modules)}", path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = mod
        spec.loader.exec_module(mod)
        _modules[path] = mod
    return getattr(mod, name)


def _constexpr(value):
    if isinstance(value, str) and tl.dtype.is_dtype(value):
        return tl.dtype(value)
    if isinstance(value, dict) and "constexpr" in value:
        return tl.constexpr(value["constexpr"])
    return value


def _listify(v):
    return tuple(_listify(x) for x in v) if isinstance(v, list) else v


def compile_job(job: dict) -> str:
    fn = _function(job["path"], job["name"])
    d = json.loads(job["spec"])
    constexprs = {tuple(k): _constexpr(v) for k, v in zip(d["constant_keys"], d["constant_vals"])}
    attrs = {tuple(k): v for k, v in zip(d["attrs_keys"], d["attrs_vals"])}
    signature = {k: _listify(v) for k, v in d["signature"].items()}
    target = GPUTarget("cuda", job["arch"], job["warp"])
    options = make_backend(target).parse_options(
        {k: tuple(v) if isinstance(v, list) else v for k, v in d["options"].items()}
    )
    return triton.compile(
        ASTSource(fn, signature, constexprs, attrs), target=target, options=options.__dict__
    ).hash


WARMUP = """
@triton.jit
def opendnn_worker_warmup(X, N: tl.constexpr):
    i = tl.arange(0, N)
    tl.store(X + i, tl.load(X + i) * 2.0)
"""


def warm_up(arch: int, warp: int) -> None:
    """Compile a tiny kernel first: a fresh process's first compile pays ~1 s of one-time
    set-up (MLIR contexts, the backend's libraries), best spent before jobs arrive."""
    import tempfile

    path = os.path.join(tempfile.mkdtemp(prefix="opendnn-warmup-"), "warmup.py")
    with open(path, "w") as f:
        f.write("import triton\nimport triton.language as tl\n" + WARMUP)
    fn = _function(path, "opendnn_worker_warmup")
    target = GPUTarget("cuda", arch, warp)
    options = make_backend(target).parse_options({})
    triton.compile(
        ASTSource(fn, {"X": "*fp32", "N": "constexpr"}, {(1,): 64}, {}),
        target=target,
        options=options.__dict__,
    )


def main() -> None:
    if len(sys.argv) == 3:
        try:
            warm_up(int(sys.argv[1]), int(sys.argv[2]))
        except Exception:  # noqa: BLE001 -- only a head start; the jobs still run
            pass
    for line in sys.stdin:
        try:
            out = {"ok": True, "hash": compile_job(json.loads(line))}
        except Exception:  # noqa: BLE001 -- the parent raises it at the kernel's launch
            out = {"error": traceback.format_exc(limit=6)}
        sys.stdout.write(json.dumps(out) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
