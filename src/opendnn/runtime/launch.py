"""One Triton source, two executions: compiled on CUDA tensors, interpreted on CPU tensors.

``TRITON_INTERPRET`` is read when ``@triton.jit`` decorates, so a kernel that must run
both ways keeps two wrappers of the same Python function: a ``JITFunction`` for CUDA and
an ``InterpretedFunction`` for the CPU. ``DualKernel`` holds both.

Generated sources (fusion, epilogues) are written to ``<cache>/kernels/k_<sha>.py`` and
imported, because Triton reads a kernel's source with ``inspect``; the same source hash
gives the same module, in this process and in later ones. The cache folder is
``$OPENDNN_CACHE_DIR``, else ``$XDG_CACHE_HOME/opendnn`` (``~/.cache/opendnn``). Every
file is written under a temporary name of its own and renamed into place
(``cache_files``), so threads and processes writing the same kernel at once are safe. A
folder that cannot be used (read-only, uncreatable, a file in its place) is replaced for
the process by a temporary folder removed at exit, with one ``RuntimeWarning``: the
kernels must live in real files. The first write of a process starts a background
thread that sweeps orphaned temporaries and trims the kernel files to
``backends.disk_cache_max_bytes`` / ``disk_cache_max_age_days`` (``opendnn cache trim``
does it on demand). Imported kernel modules are kept least recently used first, at most
``backends.kernel_cache_size`` of them; an evicted module leaves ``sys.modules``, and
kernels that still reference it keep working.

Threads: Triton's interpreter keeps global state (it patches ``triton.language`` for the
kernel it runs), and importing a module in one mode flips ``TRITON_INTERPRET`` for the
whole process. Both happen under ``interpreter_lock``: interpreted launches run one at a
time, and no import decorates while another mode's import or an interpreted launch runs.

Triton's interpreter sanitizes int32 arithmetic for overflow and then discards the check
unless debugging; the library turns that dead work off at import
(``_skip_interpreted_overflow_checks``), which leaves the results unchanged.

``Launcher`` is what a plan keeps: at build time it compiles the CUDA kernel for the exact
argument specialization (``warmup``), so executing a plan is a direct call into the
compiled kernel's launcher with no argument binding or cache lookup. If a pointer at run
time breaks the 16-byte alignment the kernel was specialized for, it takes Triton's
ordinary path, which compiles the right variant.

``parallel_compile()`` makes those compilations asynchronous: inside it, ``prepare_cuda``
hands the compile to worker processes (``compile_pool``), or where none can run to a
thread pool (Triton's ``AsyncCompileMode``), and the launcher collects the kernel at its
first launch. Building many plans at once (benchmark mode times several) then costs
about the longest compiles rather than their sum.
"""

from __future__ import annotations

import atexit
import dataclasses
import hashlib
import importlib.machinery
import importlib.util
import linecache
import os
import shutil
import sys
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import torch
import triton
from triton.runtime import _async_compile
from triton.runtime.interpreter import InterpretedFunction
from triton.runtime.jit import JITFunction

from .. import backends, log
from ..errors import InternalError, Status
from . import cache_files, compile_pool, kernel_math
from .lru import LRU

COMPILE_TIMEOUT_S = 600  # a worker's compile beyond this is redone in the parent
KEY_MISSES: list = []  # kernels a worker compiled under a key the launch did not use
_HEADER = """import os

import triton
import triton.language as tl

# False in the interpreted copy of a module (TRITON_INTERPRET=1 while it is imported)
_COMPILED = tl.constexpr(os.environ.get("TRITON_INTERPRET", "0") != "1")


@triton.jit
def _to_bf16(v):
    # float -> bfloat16, rounded to nearest even. Compiled: one cvt.rn. Interpreted, by
    # bits: Triton 3.6's interpreter truncates float32 and bit-casts float64.
    x = v.to(tl.float32)
    if _COMPILED:
        r = x.to(tl.bfloat16)
    else:
        b = x.to(tl.uint32, bitcast=True)
        r = ((b + 0x7FFF + ((b >> 16) & 1)) >> 16).to(tl.uint16).to(tl.bfloat16, bitcast=True)
        r = tl.where(x != x, x.to(tl.bfloat16), r)
    return r


"""
_lock = threading.Lock()
# Held by every interpreted launch and every import of a generated module (see the module
# docstring); reentrant: module_for holds it around _exec_module, which takes it too.
interpreter_lock = threading.RLock()


def _skip_interpreted_overflow_checks() -> None:
    """Triton's interpreter checks every int32 add, sub and mul for overflow by redoing it
    in int64 and comparing, then drops the result unless ``debug`` is on (the assert is
    a no-op without it, and the interpreter's options never turn it on), as compiled
    kernels drop it. The wasted work was a third to a half of an interpreted conv or
    matmul; this turns the checks off for the process."""
    from triton.runtime import interpreter

    opts = interpreter.interpreter_builder.options
    if opts.sanitize_overflow and not opts.debug:
        interpreter.interpreter_builder.options = dataclasses.replace(opts, sanitize_overflow=False)


_skip_interpreted_overflow_checks()
_folders: dict[str, tuple[str, str]] = {}  # configured -> (cache, kernels) used
_folders_lock = threading.Lock()
_fallback: list = []  # this process's temporary folder
_maintained: list = []


def configured_cache_dir() -> str:
    """The cache folder the environment names (it may not be usable: see cache_dir)."""
    return os.environ.get("OPENDNN_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "opendnn"
    )


def cache_dir() -> str:
    """The cache folder in use: the configured one, or this process's temporary folder
    when the configured one cannot be written (warned once)."""
    return _resolve()[0]


def kernel_dir() -> str:
    """The folder generated kernels are written to (``<cache_dir>/kernels`` unless that
    cannot be written)."""
    return _resolve()[1]


def _resolve() -> tuple[str, str]:
    want = configured_cache_dir()
    got = _folders.get(want)
    if got is None:
        with _folders_lock:
            got = _folders.get(want)
            if got is None:
                got = _folders[want] = _usable_folders(want)
    return got


def _usable_folders(root: str) -> tuple[str, str]:
    reason = cache_files.usable_dir(root)
    if reason is not None:
        fallback = _fallback_dir(root, reason)
        return fallback, os.path.join(fallback, "kernels")
    kernels = os.path.join(root, "kernels")
    reason = cache_files.usable_dir(kernels)
    if reason is not None:
        return root, os.path.join(_fallback_dir(kernels, reason), "kernels")
    return root, kernels


def _fallback_dir(failed: str, reason: str) -> str:
    """This process's temporary cache folder (made once, removed at exit), with a warning
    naming the folder that failed and why."""
    if not _fallback:
        try:
            d = tempfile.mkdtemp(prefix="opendnn-cache-")
        except OSError as e:
            raise InternalError(
                f"no usable cache folder: {failed} ({reason}), and no "
                f"temporary folder either ({e})",
                status=Status.INTERNAL_ERROR,
            ) from e
        os.makedirs(os.path.join(d, "kernels"), exist_ok=True)
        atexit.register(shutil.rmtree, d, True)
        _fallback.append(d)
    cache_files.warn(
        f"cache folder {failed} cannot be used ({reason}); this process "
        f"uses {_fallback[0]} instead (removed at exit)",
        stacklevel=6,
    )
    return _fallback[0]


def _kernels_failed(folder: str, reason: str) -> str:
    """A write into ``folder`` failed after it was found usable: later kernels of this
    process go to the temporary folder."""
    with _folders_lock:
        want = configured_cache_dir()
        cache, kernels = _folders.get(want) or (want, folder)
        if kernels == folder:
            kernels = os.path.join(_fallback_dir(folder, reason), "kernels")
            _folders[want] = (cache, kernels)
        return kernels


def maintain_once() -> None:
    """Sweep orphaned temporaries and trim the kernel files, once per process, on a
    background thread (called at the process's first write to the cache)."""
    if _maintained:
        return
    with _lock:
        if _maintained:
            return
        _maintained.append(True)
    cache, kernels = _resolve()
    max_bytes, max_age = backends.disk_cache_max_bytes, backends.disk_cache_max_age_days

    def run():
        try:
            cache_files.sweep_temporaries([cache, kernels])
            cache_files.trim(kernels, max_bytes, max_age)
        except Exception as e:  # noqa: BLE001 -- housekeeping must never break a run
            log.info(f"cache maintenance of {cache} failed: {e}")

    threading.Thread(target=run, daemon=True, name="opendnn-cache-trim").start()


class _FromModule:
    """A kernel function not imported yet: ``load()`` imports its module (generated source)
    in one mode. A CUDA plan never imports the interpreted twin, a CPU plan never the
    compiled one: each import executes the whole (often long) generated source. It keeps
    the source, to write the file again if it was removed meanwhile (``opendnn cache
    clear`` or ``trim`` in another process)."""

    __slots__ = ("path", "modname", "name", "interpret", "data")

    def __init__(self, path: str, modname: str, name: str, interpret: bool, data: bytes):
        self.path, self.modname, self.name, self.interpret = path, modname, name, interpret
        self.data = data

    def load(self):
        try:
            mod = module_for(self.path, self.modname, self.interpret, self.data)
        except SyntaxError as e:
            raise InternalError(
                f"generated kernel {self.name} does not parse: {e}",
                status=Status.INTERNAL_ERROR_COMPILATION_FAILED,
            ) from e
        return getattr(mod, self.name)


class DualKernel:
    """A Triton kernel wrapped both ways: ``compiled`` (JITFunction) for CUDA tensors and
    ``interpreted`` (InterpretedFunction) for CPU tensors, each made on first use."""

    def __init__(self, compiled, interpreted):
        self._compiled, self._interpreted = compiled, interpreted
        c = compiled.fn if isinstance(compiled, JITFunction) else compiled
        self.name = c.name if isinstance(c, _FromModule) else c.__name__

    @property
    def compiled(self) -> JITFunction:
        c = self._compiled
        if not isinstance(c, JITFunction):
            c = c.load() if isinstance(c, _FromModule) else c
            self._compiled = c = c if isinstance(c, JITFunction) else JITFunction(c)
        return c

    @property
    def interpreted(self) -> InterpretedFunction:
        i = self._interpreted
        if not isinstance(i, InterpretedFunction):
            i = i.load() if isinstance(i, _FromModule) else i
            self._interpreted = i = (
                i if isinstance(i, InterpretedFunction) else InterpretedFunction(i)
            )
        return i

    def __call__(self, grid, *args, **constexprs):
        """Launch on whatever device the tensor arguments live (slow path). Interpreted
        launches hold ``interpreter_lock``: the interpreter's state is process-wide."""
        if _on_cuda(args):
            return self.compiled[grid](*args, **constexprs)
        target = self.interpreted
        with interpreter_lock:
            return target[grid](*args, **constexprs)


class _SourceLoader(importlib.machinery.SourceFileLoader):
    """Imports a generated kernel without writing bytecode: compiling its Python is
    nothing next to Triton's compile, and the kernel folder then holds only files written
    atomically (``cache_files``)."""

    def set_data(self, path, data, *, _mode=0o666):
        pass


def _exec_module(path: str, modname: str, interpret: bool):
    """Import ``path`` as ``modname`` with Triton's interpreter switched on or off, so that
    every ``@triton.jit`` in it (helpers included) decorates for that mode. Holds
    ``interpreter_lock``: ``TRITON_INTERPRET`` is process-wide."""
    want = "1" if interpret else "0"
    with interpreter_lock:
        old = os.environ.get("TRITON_INTERPRET")
        if (old == "1") != interpret:
            os.environ["TRITON_INTERPRET"] = want
        try:
            spec = importlib.util.spec_from_file_location(
                modname, path, loader=_SourceLoader(modname, path)
            )
            mod = importlib.util.module_from_spec(spec)
            sys.modules[modname] = mod
            spec.loader.exec_module(mod)
            return mod
        finally:
            if old is None:
                os.environ.pop("TRITON_INTERPRET", None)
            else:
                os.environ["TRITON_INTERPRET"] = old


def module_for(path: str, modname: str, interpret: bool, data: bytes | None = None):
    """``path`` imported once per process in one mode (``modname`` + _compiled or
    _interpreted). With ``data`` (the file's expected bytes) a missing or changed file is
    written again first. The modules are kept least recently used first, at most
    ``backends.kernel_cache_size``."""
    full = modname + ("_interpreted" if interpret else "_compiled")
    key = f"{full}@{path}"
    with interpreter_lock:
        mod = _modules.get(key)
        if mod is not None:
            return mod
        if data is not None:
            path = _ensure_file(path, data)
            # Triton reads a kernel's source with inspect (the interpreter only at the
            # kernel's first launch): kept in linecache with no mtime, which linecache
            # never invalidates, it stays readable if the file is trimmed or cleared
            linecache.cache[path] = (len(data), None, data.decode().splitlines(True), path)
        mod = _modules[key] = _exec_module(path, full, interpret)
        return mod


def _forget_module(key: str, mod) -> None:
    """An imported kernel module dropped from ``_modules``: out of ``sys.modules``, and its
    source out of ``linecache`` unless the other mode's module of the file is still kept
    (a kernel still referenced was read already, or reads the file again)."""
    name = key.split("@", 1)[0]
    if sys.modules.get(name) is mod:
        del sys.modules[name]
    source = getattr(mod, "__file__", None)
    if not any(getattr(m, "__file__", None) == source for m in _modules.values()):
        entry = linecache.cache.get(source)
        if entry is not None and len(entry) == 4 and entry[1] is None:
            linecache.cache.pop(source, None)


# imported kernel modules by mode and path, least recently used dropped first
_modules = LRU(lambda: max(1, int(backends.kernel_cache_size)), on_evict=_forget_module)


def _ensure_file(path: str, data: bytes) -> str:
    """The path of a file holding ``data``: ``path``, or the same name in the process's
    temporary folder when ``path`` cannot be written. Read problems are warnings."""
    try:
        if cache_files.same_content(path, data):
            cache_files.touch(path)
            return path
    except OSError as e:
        cache_files.warn(
            f"cannot read the cached kernel {path} ({type(e).__name__}: "
            f"{e.strerror or e}); writing it again",
            stacklevel=4,
        )
    folder = os.path.dirname(path)
    try:
        os.makedirs(folder, exist_ok=True)
        cache_files.atomic_write(path, data, durable=False)
    except OSError as e:
        # a partly written kernel is never used: the content is compared before each
        # import, so the rename need not be durable
        folder = _kernels_failed(folder, f"{type(e).__name__}: {e.strerror or e}")
        path = os.path.join(folder, os.path.basename(path))
        try:
            os.makedirs(folder, exist_ok=True)
            cache_files.atomic_write(path, data, durable=False)
        except OSError as e2:
            raise InternalError(
                f"cannot write the generated kernel {path}: {e2}", status=Status.INTERNAL_ERROR
            ) from e2
    maintain_once()
    return path


def kernel_from_source(source: str, name: str) -> DualKernel:
    """Generated Triton source (without header) written to the kernel cache, and function
    ``name`` of it wrapped both ways (each way imported on first use)."""
    data = (_HEADER + kernel_math.helpers_for(source) + source).encode()
    digest = hashlib.sha256(data).hexdigest()[:24]
    path = _ensure_file(os.path.join(kernel_dir(), f"k_{digest}.py"), data)
    modname = f"opendnn_generated_{digest}"
    return DualKernel(
        _FromModule(path, modname, name, False, data), _FromModule(path, modname, name, True, data)
    )


_pool: list = []


def _thread_pool() -> ThreadPoolExecutor:
    with _lock:
        if not _pool:
            _pool.append(
                ThreadPoolExecutor(
                    max_workers=min(16, os.cpu_count() or 1), thread_name_prefix="opendnn-compile"
                )
            )
        return _pool[0]


_in_parallel = threading.local()


@contextmanager
def parallel_compile(workers: bool = False):
    """Compile every CUDA kernel prepared inside the block in parallel: with ``workers``
    (many plans: benchmark mode, build_plans(ALL)) in worker processes, collected at the
    block's end; otherwise in a thread pool, each kernel collected at its first launch
    (one plan's few kernels: a worker's start-up would cost more than it saves). Nested
    blocks join the outermost one. A kernel that fails to compile raises at its
    launcher's first launch (with Triton's error)."""
    if getattr(_in_parallel, "on", False) or _async_compile.active_mode.get() is not None:
        yield
        return
    if workers and compile_pool.workers_wanted() > 0:
        _in_parallel.on, _in_parallel.pending = True, []
        try:
            yield
        finally:
            _in_parallel.on = False
            pending, _in_parallel.pending = _in_parallel.pending, []
        _collect(pending)
        return
    with triton.AsyncCompileMode(_thread_pool(), ignore_errors=True):
        yield


def _collect(launchers: list) -> None:
    """Load the kernels the workers compiled (from Triton's cache; building Triton's C
    launchers and loading modules mostly runs outside the GIL) on a few threads, on the
    current device. A kernel that fails here raises at its launch instead."""
    if not launchers:
        return
    device = torch.cuda.current_device()
    for t in _warming:  # computed once, not by every collecting thread
        t.join()

    def finish(launcher):
        try:
            with torch.cuda.device(device):
                launcher._finish_compile()
        except Exception:  # noqa: BLE001 -- left pending: its first launch raises it
            pass

    list(_thread_pool().map(finish, launchers))


def start_compile_workers() -> None:
    """Start the compile workers for the current CUDA device, if they are wanted, and
    warm up Triton's own one-time pieces meanwhile (see _warm_triton)."""
    if compile_pool.workers_wanted() > 0:
        _warm_triton()
        compile_pool.start(*_cuda_target())


_warming: list = []


def _warm_triton() -> None:
    """Compute ``triton_key()`` (a hash of Triton's sources and its 400 MB libtriton.so,
    once per process) on a background thread. The first compile of a process needs it,
    and the collecting threads of a find each computed it at once, side by side (its
    cache does not lock): 0.4-0.5 s of the first find on the H100 host, after the
    workers had finished. The thread then starts Triton's driver (its C utilities)."""
    from triton.runtime.cache import triton_key

    def warm():
        triton_key()
        from triton.runtime import driver

        driver.active.get_current_target()  # builds Triton's C utilities if not cached

    with _lock:
        if _warming:
            return
        t = threading.Thread(target=warm, daemon=True, name="opendnn-triton-warm-up")
        t.start()
        _warming.append(t)


class _Prefetch:
    """A kernel a worker process is compiling into Triton's cache."""

    __slots__ = ("future", "example")

    def __init__(self, future, example):
        self.future, self.example = future, example


_target: list = []


def _cuda_target() -> tuple:
    """(arch, warp size) of the current CUDA device, as Triton's driver names it -- read
    from torch: Triton's driver builds its C utilities on first use (a C compiler run of
    ~0.8 s on a fresh machine), which the workers' start must not wait for."""
    if not _target:
        major, minor = torch.cuda.get_device_capability()
        _target.append((major * 10 + minor, 32))
    return _target[0]


def _submit_to_workers(kernel: "DualKernel", example: list, grid: tuple, constexprs: dict):
    """The in-memory kernel if Triton already has it, a _Prefetch when a worker took the
    compile, None when the caller must compile itself."""
    jit = kernel.compiled
    k, spec = compile_pool.capture_spec(jit, example, grid, constexprs)
    if k is not None:
        return k
    if spec is None:
        return None
    fut = compile_pool.submit(jit.fn.__code__.co_filename, jit.fn.__name__, spec, *_cuda_target())
    return None if fut is None else _Prefetch(fut, example)


def _raw_stream(index) -> int:
    """The current CUDA stream's handle (torch's C accessor: no Stream object built)."""
    return torch._C._cuda_getCurrentRawStream(
        torch.cuda.current_device() if index is None else index
    )


def _on_cuda(args) -> bool:
    for a in args:
        if isinstance(a, torch.Tensor):
            return a.is_cuda
        if hasattr(a, "data_ptr") and hasattr(a, "device"):
            return getattr(a.device, "type", a.device) == "cuda"
    return False


class Launcher:
    """A kernel launch bound to a grid and to constexpr values, compiled ahead for CUDA.

    ``arg_kinds`` marks each runtime argument 'ptr' or 'val'; pointers must have a
    ``data_ptr()``. Call ``prepare_cuda(example_args)`` at plan build (``example_args``
    may hold torch dtypes in place of pointers), then ``launch(args, stream)``.
    """

    __slots__ = ("kernel", "grid", "constexprs", "_compiled", "_pending", "_ptr_positions", "_tail")

    def __init__(self, kernel: DualKernel, grid: tuple, constexprs: dict):
        self.kernel = kernel
        self.grid = tuple(grid) + (1,) * (3 - len(grid))
        self.constexprs = dict(constexprs)
        self._compiled = None
        self._pending = None  # a compile running in parallel_compile's pool
        self._ptr_positions = ()
        self._tail = ()

    def prepare_cuda(self, example_args: list) -> None:
        """Compile for the current CUDA device without launching (inside
        ``parallel_compile``: start the compile; the first launch collects it)."""
        k = None
        if getattr(_in_parallel, "on", False):
            k = _submit_to_workers(self.kernel, example_args, self.grid, self.constexprs)
        if k is None:
            k = self.kernel.compiled.warmup(*example_args, grid=self.grid, **self.constexprs)
        if isinstance(k, _Prefetch):
            self._pending = k
            _in_parallel.pending.append(self)
        elif hasattr(k, "result"):
            self._pending = k
        else:
            k._init_handles()
            self._compiled = k
        self._ptr_positions = tuple(
            i
            for i, a in enumerate(example_args)
            if isinstance(a, torch.dtype) or hasattr(a, "data_ptr")
        )
        # run() wants every parameter, constexprs included, in signature order
        params = self.kernel.compiled.params
        n_rt = len(example_args)
        self._tail = tuple(
            self.constexprs[p.name] if p.name in self.constexprs else p.default
            for p in params[n_rt:]
        )

    def _finish_compile(self):
        p = self._pending
        if p is None:  # collected meanwhile by another thread
            return self._compiled
        if isinstance(p, _Prefetch):
            try:
                ans = p.future.result(timeout=COMPILE_TIMEOUT_S)
            except TimeoutError:
                ans = {}
            # from Triton's cache, or (the worker failed) compiled here: a genuine
            # compile error raises now
            k = self.kernel.compiled.warmup(*p.example, grid=self.grid, **self.constexprs)
            if ans.get("hash") and ans["hash"] != getattr(k, "hash", None):
                # the worker compiled another specialization: this one was compiled here
                KEY_MISSES.append(self.kernel.name)
                log.info(
                    f"compile worker built {self.kernel.name} under another key than "
                    "the one launched; compiled again in this process"
                )
        else:
            k = p.result()  # raises the compile's error, if any
        k._init_handles()
        self._compiled, self._pending = k, None
        return k

    def launch(self, args: list, stream=None) -> None:
        compiled = self._compiled
        if compiled is None and self._pending is not None:
            compiled = self._finish_compile()
        first = args[self._ptr_positions[0]] if self._ptr_positions else None
        if compiled is not None and first is not None and first.device.type == "cuda":
            for i in self._ptr_positions:
                if args[i].data_ptr() & 15:
                    break
            else:
                if stream is None:
                    stream = _raw_stream(first.device.index)
                g = self.grid
                compiled.run(
                    g[0],
                    g[1],
                    g[2],
                    stream,
                    compiled.function,
                    compiled.packed_metadata,
                    None,
                    None,
                    None,
                    *args,
                    *self._tail,
                )
                return
        self.kernel(self.grid, *args, **self.constexprs)


class LaunchList:
    """The launches of a built plan stage, each with an argument template.

    A template entry is ``("buf", uid)`` (a bound buffer, or the host value of a
    pass-by-value tensor), ``("float", uid)`` (a pass-by-value tensor's value as a Python
    float), ``("ws", torch dtype)`` (the workspace seen as that type) or ``("int", value)``
    (a constant). Kernels are compiled for CUDA when the stage is built.
    """

    def __init__(self):
        self.launches: list = []

    def add_launch(
        self, kernel: DualKernel, grid, constexprs: dict, args: list, graph, compile_cuda: bool
    ) -> None:
        launcher = Launcher(kernel, grid, constexprs)
        if compile_cuda:
            example = []
            for kind, key in args:
                if kind in ("buf", "float"):
                    d = graph.tensors[key]
                    example.append(1.5 if d.is_pass_by_value else d.torch_dtype)
                elif kind == "ws":
                    example.append(key)
                else:
                    example.append(key)
            launcher.prepare_cuda(example)
        self.launches.append((launcher, args))

    @staticmethod
    def values(args: list, buffers: dict, workspace) -> list:
        out = []
        for kind, key in args:
            if kind == "buf":
                out.append(buffers[key])
            elif kind == "float":  # a host scalar entering a float compute
                out.append(float(buffers[key]))
            elif kind == "ws":
                out.append(workspace.view(key))
            else:
                out.append(key)
        return out

    def run_launches(self, buffers: dict, workspace, stream=None) -> None:
        for launcher, args in self.launches:
            launcher.launch(self.values(args, buffers, workspace), stream)
