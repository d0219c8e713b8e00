"""The ``opendnn`` command.

    opendnn bench [family] [--out DIR]   benchmark against cuDNN/cuBLAS (needs a GPU)
    opendnn demo                         the seed examples, with plans and timings
    opendnn version                      library, cuDNN-API and Triton versions
    opendnn cache [show|clear]           the autotune cache and generated kernels
"""
from __future__ import annotations

import os
import shutil
import sys


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    cmd = argv.pop(0) if argv else "help"
    if cmd == "bench":
        from .bench.__main__ import main as bench_main
        return bench_main(argv)
    if cmd == "demo":
        from .demo import main as demo_main
        return demo_main()
    if cmd == "version":
        import triton
        from . import frontend
        print(frontend.backend_version_string(), f"triton {triton.__version__}")
        return 0
    if cmd == "cache":
        from .runtime import autotune
        from .runtime.launch import cache_dir
        action = argv[0] if argv else "show"
        root = cache_dir()
        if action == "clear":
            shutil.rmtree(root, ignore_errors=True)
            autotune.forget_memory()
            print(f"removed {root}")
            return 0
        kernels = os.path.join(root, "kernels")
        n = len(os.listdir(kernels)) if os.path.isdir(kernels) else 0
        tuned = autotune.path()
        print(f"cache folder {root}: {n} generated kernel files; autotune file "
              f"{tuned if os.path.exists(tuned) else '(none yet)'}")
        return 0
    print(__doc__)
    return 0 if cmd in ("help", "-h", "--help") else 2


if __name__ == "__main__":
    sys.exit(main())
