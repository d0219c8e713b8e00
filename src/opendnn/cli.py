"""The ``opendnn`` command.

    opendnn bench [family] [--out DIR]   benchmark against cuDNN/cuBLAS (needs a GPU)
    opendnn demo                         the seed examples, with plans and timings
    opendnn version                      library, cuDNN-API and Triton versions
    opendnn cache [show|clear|trim]      the autotune cache and generated kernels

``opendnn cache show`` prints the cache folder, its autotune entries, generated kernel
files and bytes; ``clear`` removes them; ``trim [--max-bytes N] [--max-age-days D]``
removes orphaned temporaries and the least recently used kernel files until none is
older than D days and they fit in N bytes (defaults: ``backends.disk_cache_max_bytes``
and ``disk_cache_max_age_days``; a process also trims so, once, in the background, when
it first writes the cache).
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

        from . import __version__, frontend

        print(
            f"opendnn {__version__} (cuDNN API {frontend.backend_version_string()}, "
            f"cudnn-frontend API {frontend.__version__})",
            f"triton {triton.__version__}",
        )
        return 0
    if cmd == "cache":
        return _cache(argv)
    print(__doc__)
    return 0 if cmd in ("help", "-h", "--help") else 2


def _cache(argv: list) -> int:
    """``opendnn cache show|clear|trim``: on the configured folder (not a process's
    temporary stand-in for it)."""
    import argparse

    from . import backends
    from .runtime import autotune, cache_files
    from .runtime.launch import configured_cache_dir

    parser = argparse.ArgumentParser(prog="opendnn cache")
    parser.add_argument("action", nargs="?", default="show", choices=("show", "clear", "trim"))
    parser.add_argument(
        "--max-bytes",
        type=int,
        default=None,
        help="keep at most this many bytes of kernel files (default backends.disk_cache_max_bytes)",
    )
    parser.add_argument(
        "--max-age-days",
        type=float,
        default=None,
        help="remove kernel files unused for longer (default backends.disk_cache_max_age_days)",
    )
    args = parser.parse_args(argv)
    root = configured_cache_dir()
    kernels = os.path.join(root, "kernels")
    tuned = os.path.join(root, "autotune-v1.json")
    if args.action == "clear":
        shutil.rmtree(kernels, ignore_errors=True)
        for name in _listdir(root):
            if name.startswith("autotune-v1.json") or name.endswith(".tmp"):
                try:
                    os.unlink(os.path.join(root, name))
                except OSError:
                    pass
        try:
            os.rmdir(root)  # only when nothing else is left in it
        except OSError:
            pass
        autotune.forget_memory()
        print(f"cleared {root}")
        return 0
    if args.action == "trim":
        max_bytes = backends.disk_cache_max_bytes if args.max_bytes is None else args.max_bytes
        max_age = (
            backends.disk_cache_max_age_days if args.max_age_days is None else args.max_age_days
        )
        swept = cache_files.sweep_temporaries([root, kernels])
        removed, freed = cache_files.trim(kernels, max_bytes, max_age)
        print(
            f"trimmed {root}: removed {removed} kernel files ({freed} bytes) and {swept} "
            f"orphaned temporaries (limits {max_bytes} bytes, {max_age} days)"
        )
    files = cache_files.kernel_files(kernels)
    size = sum(b for _, b, _ in files)
    try:
        size += os.stat(tuned).st_size
    except OSError:
        pass
    entries = cache_files.JsonStore(
        tuned, autotune.FORMAT, autotune.valid_entry, "autotune cache"
    ).entries()
    print(
        f"cache folder {root}: {len(entries)} autotune entries, {len(files)} generated "
        f"kernel files, {size} bytes"
    )
    return 0


def _listdir(folder: str) -> list:
    try:
        return os.listdir(folder)
    except OSError:
        return []


if __name__ == "__main__":
    sys.exit(main())
