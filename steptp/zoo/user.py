"""User workloads: any ``nn.Module`` factory, and folders of KernelBench-style problem files.

``--model pkg.module:factory --inputs 'f32[1,3,32,32];i64[1,16]'``
    :func:`from_factory` imports ``pkg.module`` with importlib (never ``eval``) and calls
    ``factory()`` with no arguments. It may return an ``nn.Module`` or ``(module, inputs)``;
    ``--inputs`` (parsed by :func:`parse_inputs`) overrides the inputs it returns.
    ``path/to/file.py:factory`` loads a file instead of an importable module.

``--problems DIR [--scale S]``
    :func:`load_problems` makes one workload per ``*.py`` file in DIR that defines
    ``class Model``, ``get_inputs()`` and ``get_init_inputs()`` (the KernelBench convention).
    Building a problem executes its file (that is what a problem is). ``steptp extract`` does
    it only in contained workers (``steptp.measure.sandbox``) and, for folders that are not
    steptp's own examples (:func:`untrusted_problems`), only with ``--trust``. This module's
    functions themselves execute the files in the calling process.

Input spec grammar (``parse_inputs``): tensors separated by ``;``, each ``DTYPE[D0,D1,...]`` with
an optional value range ``@LO:HI``::

    f32[1,3,32,32]            standard normal float32
    f32[4,8]@0:1              uniform in [0, 1)
    i64[1,16]@0:32000         integers in [0, 32000)   (integer default range: [0, 100))
    bool[1,16]                random booleans; f32[] is a 0-d tensor

DTYPE is one of f16 bf16 f32 f64 i8 i16 i32 i64 u8 bool (or the torch names float32, int64, ...).

Inputs: a tensor ``get_inputs()`` builds on the ``meta`` device is materialized as seeded random
data of its shape and dtype (standard normal; integers in [0, 100); booleans), and so are meta
parameters (``to_empty`` + normal * 0.1). A Python ``float`` becomes a 0-d float32 tensor input
(kept as a constant bound into the model when the forward pass only accepts a number); a Python
``int`` or ``bool`` is a constant bound into the model (``torch.export`` would specialise it).
What was done is in ``meta["scale_used"][size]`` (``meta_inputs``, ``scalar_inputs``,
``constant_inputs``).

Scaling problems (``--scale``; :func:`parse_scale`) -- what exactly happens:
  1. The problem file is executed afresh (its own module object) for every build.
  2. A *factor* ``s`` < 1: every module-level global of the file whose value is an ``int`` (not
     ``bool``) with ``abs(value) >= min_dim`` (default 16), or a tuple/list of ints, is replaced
     by ``max(1, round(value * s))`` element by element; a value that was a multiple of 8 is
     rounded to a multiple of 8 (at least 8) so that alignment and divisibility by small
     head/group counts survive. Smaller ints (kernel sizes, strides, padding, dilation, the
     ``dim`` to reduce over, groups and head counts below ``min_dim``), floats, bools and
     strings are left alone.
  3. ``get_init_inputs()``, ``Model(*init_inputs)`` and ``get_inputs()`` are then called; they
     read the scaled globals at call time.
  4. Sizes are decided before anything is allocated: the problem is first built on the ``meta``
     device and its forward pass run there, recording the largest tensor (input, parameter,
     buffer or intermediate). With a factor, if the scaled problem fails to build or run, the
     factors ``sqrt(s)``, ``s/2``, ``s/4`` and ``1`` are tried in that order, a *larger* one only
     when its largest tensor has at most ``max_elements`` (``DEFAULT_MAX_ELEMENTS``) elements:
     a problem that only builds at 1024x8192x8192 is reported, never checked at that size.
  5. ``elements=N``: the largest factor on a ladder (1, 1/sqrt(2), 1/2, ... down to
     ``MIN_FACTOR``) whose largest tensor has at most N elements. When no factor gets there
     (sizes written as literals, ``torch.randn(10, 3, 224, 224)`` in ``get_inputs``), the batch
     (dim 0) and spatial (dims 2.. of 3-D and larger inputs) input dimensions are halved, the
     largest first and jointly across inputs that share the size, each step kept only when the
     meta forward pass accepts the new shapes; the factories in ``get_inputs`` (``randn``,
     ``rand``, ``randint``, ``zeros``, ``ones``, ``empty``, ``full``) are then called with the
     new sizes. A problem that cannot get under N is an error naming its largest tensor.
  6. ``seconds=T``: as ``elements=`` with ``max_elements``, then the factor is halved until one
     PyTorch forward pass (after a warm-up) takes at most T seconds (timing-dependent: use
     ``elements=`` for reproducible sizes).
  7. The scaled model is run once on its real inputs. The factor used is recorded in
     ``workload.meta["applied_scale"][size]`` (1.0 means no global was changed), the whole
     decision (form, factor, largest tensor, input shapes, shrunk inputs) in
     ``meta["scale_used"][size]`` and, through extraction, in the summary per workload.
  Where it does not apply: sizes computed inside ``Model`` from literals, sizes held in floats,
  strings or dicts, and constraints between a scaled and an unscaled number (``hidden = 48``
  with ``num_heads = 12``: 48 -> 12 is still divisible, but e.g. 40 -> 10 with 4 heads is not)
  -- those fall back to another factor or are reported.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import math
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Callable

import torch
import torch.utils._python_dispatch
import torch.utils._pytree
from torch import nn

from steptp.zoo._base import ALL_FLOAT, Workload

# ----------------------------------------------------------------------------- input specs
_DTYPE_CODES: dict[str, torch.dtype] = {
    "f16": torch.float16, "fp16": torch.float16, "float16": torch.float16, "half": torch.float16,
    "bf16": torch.bfloat16, "bfloat16": torch.bfloat16,
    "f32": torch.float32, "fp32": torch.float32, "float32": torch.float32, "float": torch.float32,
    "f64": torch.float64, "fp64": torch.float64, "float64": torch.float64,
    "i8": torch.int8, "int8": torch.int8, "i16": torch.int16, "int16": torch.int16,
    "i32": torch.int32, "int32": torch.int32, "i64": torch.int64, "int64": torch.int64,
    "long": torch.int64, "u8": torch.uint8, "uint8": torch.uint8, "bool": torch.bool,
}

_NUM = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"
_SPEC_RE = re.compile(
    rf"^\s*(?P<dtype>[A-Za-z][A-Za-z0-9]*)\s*\[(?P<dims>[\d\s,]*)\]\s*"
    rf"(?:@\s*(?P<lo>{_NUM})\s*:\s*(?P<hi>{_NUM}))?\s*$")


class InputSpecError(ValueError):
    pass


def parse_input_spec(spec: str) -> list[tuple[torch.dtype, tuple[int, ...], tuple[float, float] | None]]:
    """``"f32[1,3,32,32];i64[1,16]@0:1000"`` -> ``[(dtype, shape, range-or-None), ...]``."""
    out = []
    parts = [s for s in spec.split(";") if s.strip()]
    if not parts:
        raise InputSpecError(f"empty input spec {spec!r}")
    for part in parts:
        m = _SPEC_RE.match(part)
        if not m:
            raise InputSpecError(
                f"bad tensor spec {part.strip()!r}: expected DTYPE[D0,D1,...] with an optional "
                f"@LO:HI range, e.g. 'f32[1,3,32,32]' or 'i64[1,16]@0:1000'")
        code = m.group("dtype").lower()
        if code not in _DTYPE_CODES:
            raise InputSpecError(f"unknown dtype {m.group('dtype')!r} in {part.strip()!r}; "
                                 f"valid: {', '.join(sorted(_DTYPE_CODES))}")
        dims_text = m.group("dims").strip()
        dims = tuple(int(d) for d in dims_text.split(",") if d.strip()) if dims_text else ()
        if dims_text and len(dims) != len([d for d in dims_text.split(",")]):
            raise InputSpecError(f"bad dimension list in {part.strip()!r}")
        rng = None
        if m.group("lo") is not None:
            lo, hi = float(m.group("lo")), float(m.group("hi"))
            if not hi > lo:
                raise InputSpecError(f"empty range @{lo}:{hi} in {part.strip()!r}")
            rng = (lo, hi)
        out.append((_DTYPE_CODES[code], dims, rng))
    return out


def parse_inputs(spec: str, generator: torch.Generator | None = None) -> tuple[torch.Tensor, ...]:
    """Random tensors for an input spec (see the module docstring), drawn from ``generator``."""
    g = generator if generator is not None else torch.Generator().manual_seed(0)
    tensors = []
    for dtype, shape, rng in parse_input_spec(spec):
        if dtype == torch.bool:
            t = torch.rand(shape, generator=g) < 0.5
        elif dtype.is_floating_point:
            if rng is None:
                t = torch.randn(shape, generator=g)
            else:
                t = torch.rand(shape, generator=g) * (rng[1] - rng[0]) + rng[0]
            t = t.to(dtype)
        else:
            lo, hi = (0, 100) if rng is None else (math.ceil(rng[0]), math.ceil(rng[1]))
            if hi <= lo:
                raise InputSpecError(f"empty integer range [{lo}, {hi})")
            t = torch.randint(lo, hi, shape, generator=g, dtype=torch.int64).to(dtype)
        tensors.append(t)
    return tuple(tensors)


# ----------------------------------------------------------------------------- module factories
_TARGET_RE = re.compile(r"^(?P<mod>[^:]+):(?P<attr>[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)$")
_MODNAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*$")


def _load_file_module(path: Path, unique: bool = True) -> ModuleType:
    """Execute a Python file as a fresh module object (a new one every call)."""
    path = Path(path).resolve()
    digest = hashlib.sha256(str(path).encode()).hexdigest()[:12]
    name = f"steptp_user_{path.stem.replace('-', '_').replace('.', '_')}_{digest}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and pickling look the module up while it runs
    try:
        spec.loader.exec_module(module)
    finally:
        if unique:
            sys.modules.pop(name, None)
    return module


def resolve_factory(target: str) -> Callable[..., Any]:
    """``pkg.module:factory`` (importlib) or ``path/to/file.py:factory`` -> the callable."""
    m = _TARGET_RE.match(target.strip())
    if not m:
        raise ValueError(f"bad model reference {target!r}: expected 'pkg.module:factory' or "
                         f"'path/to/file.py:factory'")
    mod_ref, attr = m.group("mod"), m.group("attr")
    if mod_ref.endswith(".py") or "/" in mod_ref or "\\" in mod_ref:
        if not Path(mod_ref).is_file():
            raise FileNotFoundError(f"model file {mod_ref!r} not found")
        obj: Any = _load_file_module(Path(mod_ref), unique=False)
    else:
        if not _MODNAME_RE.match(mod_ref):
            raise ValueError(f"bad module name {mod_ref!r} in {target!r}")
        obj = importlib.import_module(mod_ref)
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise AttributeError(f"{target!r}: {getattr(obj, '__name__', obj)!r} has no "
                                 f"attribute {part!r}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise TypeError(f"{target!r} is not callable")
    return obj


def _split_factory_result(res: Any, target: str) -> tuple[nn.Module, tuple | None]:
    if isinstance(res, nn.Module):
        return res, None
    if isinstance(res, (tuple, list)) and len(res) == 2 and isinstance(res[0], nn.Module):
        inputs = res[1]
        inputs = (inputs,) if isinstance(inputs, torch.Tensor) else tuple(inputs)
        return res[0], inputs
    raise TypeError(f"{target!r} returned {type(res).__name__}; expected an nn.Module or "
                    f"(nn.Module, inputs)")


def from_factory(target: str, inputs: str | None = None, *, name: str | None = None,
                 tiny_inputs: str | None = None, dtypes: tuple[str, ...] = ALL_FLOAT,
                 register: bool = False) -> Workload:
    """A ``user`` workload for ``pkg.module:factory`` with inputs from an input spec.

    ``inputs`` is used for both sizes unless ``tiny_inputs`` gives a smaller one. Without an
    input spec the factory must return ``(module, inputs)``. The factory is resolved now (so a
    bad reference fails early) and called on every ``build``.
    """
    factory = resolve_factory(target)
    for spec in (inputs, tiny_inputs):
        if spec is not None:
            parse_input_spec(spec)  # fail early on a bad spec

    def build(p: dict[str, Any], g: torch.Generator):
        module, own_inputs = _split_factory_result(factory(), target)
        if p.get("inputs"):
            return module, parse_inputs(p["inputs"], g)
        if own_inputs is None:
            raise ValueError(f"{target!r} returned no example inputs; pass --inputs "
                             f"(e.g. 'f32[1,3,32,32]')")
        return module, own_inputs

    w = Workload(name=name or f"user.{target.replace(':', '.').replace('/', '.')}",
                 suite="user", family="user", factory=build,
                 sizes={"default": {"inputs": inputs}, "tiny": {"inputs": tiny_inputs or inputs}},
                 dtypes=dtypes, description=f"user model {target}",
                 meta={"source": target})
    if register:
        from steptp.zoo import workloads

        workloads.register(w)
    return w


# ----------------------------------------------------------------------------- problem folders
def _scale_int(v: int, scale: float, min_dim: int) -> int:
    if abs(v) < min_dim:
        return v
    new = max(1, round(abs(v) * scale))
    if v % 8 == 0:
        new = max(8, int(round(new / 8)) * 8)
    return new if v > 0 else -new


def scale_globals(module: ModuleType, scale: float, min_dim: int = 16,
                  keep: frozenset[str] = frozenset()) -> dict[str, tuple[Any, Any]]:
    """Shrink the module-level integer size constants of a problem module in place (rule in the
    module docstring), except the globals named in ``keep``; returns ``{name: (old, new)}`` for
    the globals it changed."""
    changed: dict[str, tuple[Any, Any]] = {}
    if scale >= 1:
        return changed
    for key, val in list(vars(module).items()):
        if key.startswith("_") or isinstance(val, bool) or key in keep:
            continue
        if isinstance(val, int):
            new: Any = _scale_int(val, scale, min_dim)
        elif isinstance(val, (tuple, list)) and val and \
                all(isinstance(x, int) and not isinstance(x, bool) for x in val):
            new = type(val)(_scale_int(x, scale, min_dim) for x in val)
        else:
            continue
        if new != val:
            setattr(module, key, new)
            changed[key] = (val, new)
    return changed


def is_problem_file(path: Path) -> bool:
    """Cheap text check: defines ``class Model`` and both input functions."""
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    return (re.search(r"^class\s+Model\b", text, re.M) is not None
            and re.search(r"^def\s+get_inputs\s*\(", text, re.M) is not None
            and re.search(r"^def\s+get_init_inputs\s*\(", text, re.M) is not None)


def _problem_name(path: Path, prefix: str) -> str:
    return prefix + re.sub(r"[^A-Za-z0-9_.-]+", "_", path.stem)


# ----------------------------------------------------------------------------- scale forms
#: the factor form never falls back to a larger scale whose largest tensor exceeds this many
#: elements (64 MiB of float32): a problem that only builds unscaled at 1024x8192x8192 is
#: reported, not checked for tens of minutes.
DEFAULT_MAX_ELEMENTS = 1 << 24
#: the smallest factor the target forms try before they shrink input dimensions instead
MIN_FACTOR = 1.0 / 4096

_SUFFIX = {"": 1, "k": 10**3, "K": 1 << 10, "m": 10**6, "M": 1 << 20, "g": 10**9, "G": 1 << 30}
_ELEM_RE = re.compile(r"^\s*(?:elements|elems)\s*[=:]\s*(\d+(?:\.\d*)?)\s*([kKmMgG]?)\s*$")
_SEC_RE = re.compile(r"^\s*(seconds|s|ms)\s*[=:]\s*(\d+(?:\.\d*)?|\.\d+)\s*$")


@dataclass(frozen=True)
class Scale:
    """How problem sizes are scaled: ``factor`` (every size global times ``value``),
    ``elements`` (the largest tensor -- input, parameter or intermediate -- has at most
    ``value`` elements) or ``seconds`` (the PyTorch forward pass takes at most ``value`` s)."""

    kind: str
    value: float

    def __str__(self) -> str:
        if self.kind == "factor":
            return f"{self.value:g}"
        if self.kind == "elements":
            return f"elements={int(self.value)}"
        return f"seconds={self.value:g}"


class ScaleError(ValueError):
    pass


def parse_scale(value: "float | str | Scale") -> Scale:
    """``0.25`` (a factor in (0, 1]), ``elements=1M`` / ``elements=262144`` (the largest tensor
    fits; suffixes k=1e3, K=2^10, m=1e6, M=2^20, g, G) or ``seconds=0.05`` / ``ms=50`` (the
    reference forward pass fits)."""
    if isinstance(value, Scale):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        v = float(value)
        if not 0 < v <= 1:
            raise ScaleError(f"scale must be in (0, 1], got {value}")
        return Scale("factor", v)
    text = str(value).strip()
    try:
        return parse_scale(float(text))
    except ValueError as e:
        if isinstance(e, ScaleError):
            raise
    m = _ELEM_RE.match(text)
    if m:
        n = int(float(m.group(1)) * _SUFFIX[m.group(2)])
        if n < 1:
            raise ScaleError(f"scale {text!r}: the element count must be at least 1")
        return Scale("elements", float(n))
    m = _SEC_RE.match(text)
    if m:
        v = float(m.group(2)) / (1000.0 if m.group(1) == "ms" else 1.0)
        if not v > 0:
            raise ScaleError(f"scale {text!r}: the time must be positive")
        return Scale("seconds", v)
    raise ScaleError(f"bad scale {text!r}: expected a factor in (0, 1] (e.g. 0.25), "
                     f"'elements=N' (the largest tensor has at most N elements, e.g. "
                     f"elements=1M) or 'seconds=T' / 'ms=T' (the forward pass takes at most T)")


# ----------------------------------------------------------------------------- building problems
class _ShapeRewrite(torch.overrides.TorchFunctionMode):
    """Gives the tensor factories in ``get_inputs`` new sizes: a call whose size is a key of
    ``shapes`` is made with the mapped size instead (how literal input sizes shrink)."""

    _SIZED = {"randn": 0, "rand": 0, "zeros": 0, "ones": 0, "empty": 0, "full": 0}

    def __init__(self, shapes: dict[tuple, tuple]):
        super().__init__()
        self.shapes = shapes

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        name = getattr(func, "__name__", "")
        if name in self._SIZED or name == "randint":
            args, kwargs = self._resize(name, list(args), kwargs)
        return func(*args, **kwargs)

    def _resize(self, name, args, kwargs):
        if "size" in kwargs:
            new = self.shapes.get(tuple(int(d) for d in kwargs["size"]))
            if new is not None:
                kwargs["size"] = new
            return args, kwargs
        if name == "randint":  # randint(high, size) / randint(low, high, size)
            for i in (1, 2):
                if len(args) > i and isinstance(args[i], (tuple, list, torch.Size)):
                    new = self.shapes.get(tuple(int(d) for d in args[i]))
                    if new is not None:
                        args[i] = new
            return args, kwargs
        if args and isinstance(args[0], (tuple, list, torch.Size)):
            new = self.shapes.get(tuple(int(d) for d in args[0]))
            if new is not None:
                args[0] = new
        elif name != "full":
            n = 0
            while n < len(args) and isinstance(args[n], int) and not isinstance(args[n], bool):
                n += 1
            new = self.shapes.get(tuple(args[:n])) if n else None
            if new is not None:
                args = list(new) + args[n:]
        return args, kwargs


class _Largest(torch.utils._python_dispatch.TorchDispatchMode):
    """Records the element count of the largest tensor any operator produces."""

    def __init__(self):
        super().__init__()
        self.n = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in torch.utils._pytree.tree_leaves(out):
            if isinstance(t, torch.Tensor):
                self.n = max(self.n, t.numel())
        return out


def _instantiate(path: Path, scale: float, min_dim: int, shapes: dict | None = None,
                 keep: frozenset[str] = frozenset()) -> tuple[nn.Module, tuple, dict]:
    module = _load_file_module(path)
    for attr in ("Model", "get_inputs", "get_init_inputs"):
        if not hasattr(module, attr):
            raise AttributeError(f"problem file {path} defines no {attr}")
    changed = scale_globals(module, scale, min_dim, keep)
    init = module.get_init_inputs()
    init = list(init) if isinstance(init, (list, tuple)) else [init]
    model = module.Model(*init)
    if shapes:
        with _ShapeRewrite(shapes):
            inputs = module.get_inputs()
    else:
        inputs = module.get_inputs()
    inputs = (inputs,) if isinstance(inputs, torch.Tensor) else tuple(inputs)
    inputs = tuple(x.detach() if isinstance(x, torch.Tensor) else x for x in inputs)
    return model, inputs, changed


@dataclass
class _Probe:
    scale: float
    largest: int            # elements of the largest tensor (inputs, weights, intermediates)
    shapes: list            # input shapes (None for a non-tensor input)
    forward_ok: bool        # the meta forward pass ran (False: unknown or rejected)
    error: str = ""
    keep: frozenset = frozenset()   # size globals left unscaled


def _probe(path: Path, scale: float, min_dim: int, shapes: dict | None = None,
           device: str = "meta", keep: frozenset[str] = frozenset()) -> _Probe:
    """Build the problem on the ``meta`` device (shapes only, nothing allocated) and run its
    forward pass there, recording the largest tensor. ``largest`` is -1 when the problem does
    not even build at this scale. ``device="cpu"`` builds it for real (problems whose
    construction needs data)."""
    with torch.random.fork_rng(devices=[]), torch.device(device):
        try:
            model, inputs, _ = _instantiate(path, scale, min_dim, shapes, keep)
        except Exception as e:  # noqa: BLE001 - e.g. a divisibility check in __init__
            return _Probe(scale, -1, [], False, f"{type(e).__name__}: {e}"[:200], keep)
        tensors = [t for t in (*model.parameters(), *model.buffers(), *inputs)
                   if isinstance(t, torch.Tensor)]
        largest = max((t.numel() for t in tensors), default=0)
        shp = [tuple(x.shape) if isinstance(x, torch.Tensor) else None for x in inputs]
        try:
            mode = _Largest()
            with torch.no_grad(), mode:
                model.eval()(*[x.to(device) if isinstance(x, torch.Tensor) else x
                               for x in inputs])
            return _Probe(scale, max(largest, mode.n), shp, True, keep=keep)
        except Exception as e:  # noqa: BLE001 - data-dependent or meta-less operators
            return _Probe(scale, largest, shp, False, f"{type(e).__name__}: {e}"[:200], keep)


def _ladder() -> list[float]:
    """1, 1/sqrt(2), 1/2, ... down to MIN_FACTOR (powers of two exact)."""
    out, k = [], 0
    while 2 ** (-k / 2) >= MIN_FACTOR:
        out.append(0.5 ** (k // 2) * (math.sqrt(0.5) if k % 2 else 1.0))
        k += 1
    return out


def _shrink_inputs(path: Path, base: _Probe, limit: int, min_dim: int
                   ) -> tuple[dict[tuple, tuple], _Probe]:
    """Halve batch (dim 0) and spatial (dims 2.. of 3-D and larger) input dimensions, one size
    at a time and jointly across inputs that share it, keeping a step only if the meta forward
    pass accepts it, until the largest tensor fits ``limit`` or no step is accepted: returns the
    smallest shapes reached (their largest tensor may still exceed ``limit``)."""
    shapes = {s: s for s in base.shapes if s is not None}
    cur, dead = base, set()
    while cur.largest > limit:
        cands = []
        for shp in {shapes[s] for s in shapes}:
            for d, v in enumerate(shp):
                if v > 1 and (d == 0 or (len(shp) >= 3 and d >= 2)) and (d, v) not in dead:
                    cands.append((v, d))
        if not cands:
            break
        v, d = max(cands)
        trial = {o: (n[:d] + ((v + 1) // 2,) + n[d + 1:] if len(n) > d and n[d] == v else n)
                 for o, n in shapes.items()}
        p = _probe(path, base.scale, min_dim, {o: n for o, n in trial.items() if o != n},
                   keep=base.keep)
        if p.forward_ok and p.largest < cur.largest:
            shapes, cur = trial, p
        else:
            dead.add((d, v))
    return {o: n for o, n in shapes.items() if o != n}, cur


def _materialize(model: nn.Module, inputs: tuple, floats_as_constants: bool = False
                 ) -> tuple[nn.Module, tuple, dict]:
    """Meta-device inputs and parameters become seeded random data of the same shape and dtype;
    Python numbers become inputs: a float is a 0-d float32 tensor input, an int or bool a
    constant bound into the model (``torch.export`` would specialise it anyway)."""
    notes: dict[str, Any] = {}
    if any(t.is_meta for t in (*model.parameters(), *model.buffers())):
        model = model.to_empty(device="cpu")
        with torch.no_grad():
            for t in (*model.parameters(), *model.buffers()):
                t.copy_(torch.randn(t.shape).to(t.dtype) * 0.1 if t.is_floating_point()
                        else torch.zeros(t.shape, dtype=t.dtype))
        notes["meta_parameters"] = True
    out: list[Any] = []
    consts: dict[int, Any] = {}
    for i, x in enumerate(inputs):
        if isinstance(x, torch.Tensor):
            if x.is_meta:
                notes.setdefault("meta_inputs", []).append(i)
                if x.dtype == torch.bool:
                    x = torch.rand(x.shape) < 0.5
                elif x.is_floating_point():
                    x = torch.randn(x.shape).to(x.dtype)
                else:
                    x = torch.randint(0, 100, x.shape, dtype=torch.int64).to(x.dtype)
            out.append(x.cpu())
        elif isinstance(x, float) and not floats_as_constants:
            notes.setdefault("scalar_inputs", []).append(i)
            out.append(torch.tensor(x, dtype=torch.float32))
        elif isinstance(x, (int, float, bool)):
            consts[i] = x
        else:
            raise TypeError(f"get_inputs() returned a {type(x).__name__} at position {i}; "
                            f"expected tensors and Python numbers")
    if consts:
        notes["constant_inputs"] = {str(i): v for i, v in consts.items()}
        model = _BoundArgs(model, consts, len(inputs))
    return model.cpu(), tuple(out), notes


class _BoundArgs(nn.Module):
    """A model with some positional inputs fixed to Python constants."""

    def __init__(self, model: nn.Module, consts: dict[int, Any], n: int):
        super().__init__()
        self.model, self.consts, self.n = model, dict(consts), n

    def forward(self, *tensors):
        it = iter(tensors)
        return self.model(*[self.consts[i] if i in self.consts else next(it)
                            for i in range(self.n)])


def _scaled_names(path: Path, scale: float, min_dim: int) -> list[str]:
    """The size globals that scaling by ``scale`` changes, in the file's order."""
    return list(scale_globals(_load_file_module(path), scale, min_dim))


def _keep_for(path: Path, scale: float, min_dim: int, accepts: Callable[[_Probe], bool],
              shapes: dict | None = None) -> frozenset[str] | None:
    """The size globals to leave unscaled so that the problem builds and runs at ``scale``
    (decided on the meta device), or None when only leaving all of them does. A model built
    for one input size (Swin's ``assert H == img_size``) or one whose channels must divide a
    group count (ShuffleNet) rejects some globals at some factors; the rest still scale.
    First one global alone (the usual culprit), then, from all of them kept, each one scaled
    again while the model accepts it: at most twice as many probes as globals."""
    names = _scaled_names(path, scale, min_dim)
    if not names:
        return None
    for n in names:
        if accepts(_probe(path, scale, min_dim, shapes, keep=frozenset({n}))):
            return frozenset({n})
    keep = set(names)
    if not accepts(_probe(path, scale, min_dim, shapes, keep=frozenset(keep))):
        return None
    for n in names:
        if accepts(_probe(path, scale, min_dim, shapes, keep=frozenset(keep - {n}))):
            keep.discard(n)
    return frozenset(keep) if len(keep) < len(names) else None


def _candidates(path: Path, scale: Scale, min_dim: int, max_elements: int, notes: dict
                ) -> list[tuple[float, dict, frozenset]]:
    """The (factor, input-shape rewrites, size globals kept unscaled) to build a problem at, in
    order of preference, decided on the meta device before anything is allocated."""
    none: frozenset[str] = frozenset()
    if scale.kind == "factor" and scale.value < 1:
        p = _probe(path, scale.value, min_dim)
        if p.forward_ok:  # the usual case: the smaller fallbacks need no probe
            notes["_largest"] = {(scale.value, none): p.largest}
            return [(s, {}, none) for s in (scale.value, scale.value / 2, scale.value / 4)]
    # a rejection on the meta device only means something when the unscaled model runs there
    # (a model with data-dependent or meta-less operators fails its meta forward pass anyway)
    full = _probe(path, 1.0, min_dim)
    meta_forward = full.forward_ok

    def accepts(p: _Probe) -> bool:
        return p.largest >= 0 and (p.forward_ok or not meta_forward)

    if scale.kind == "factor":
        s = scale.value
        out = [(s, {}, none)]
        p = full if s >= 1 else p
        if s < 1:
            for c in (math.sqrt(s), s / 2, s / 4):
                q = _probe(path, c, min_dim)
                if c > s and not 0 <= q.largest <= max_elements:
                    # a larger size only while its largest tensor stays under the cap
                    notes.setdefault("not_tried", []).append(
                        f"scale {c:g}: " + (f"does not build ({q.error})" if q.largest < 0 else
                                            f"largest tensor {q.largest} elements, over the "
                                            f"cap of {max_elements}"))
                    continue
                if meta_forward and not accepts(q):
                    continue  # rejected on the meta device: a real build would fail the same way
                out.append((c, {}, none))
            if not accepts(p):
                keep = _keep_for(path, s, min_dim, accepts)
                if keep:
                    q = _probe(path, s, min_dim, keep=keep)
                    if 0 <= q.largest <= max_elements:
                        out.append((s, {}, keep))
                        notes.setdefault("_largest", {})[(s, keep)] = q.largest
                        notes["partial_scaling"] = (
                            f"at scale {s:g} the model rejects {', '.join(sorted(keep))} scaled "
                            f"({p.error or 'no forward pass'}): kept unscaled")
            if not 0 <= full.largest <= max_elements:
                notes.setdefault("not_tried", []).append(
                    f"scale 1: largest tensor "
                    f"{'unknown' if full.largest < 0 else full.largest} elements, over the "
                    f"cap of {max_elements}")
            else:
                out.append((1.0, {}, none))
        if p.largest >= 0:
            notes.setdefault("_largest", {})[(s, none)] = p.largest
        return out
    limit = int(scale.value) if scale.kind == "elements" else max_elements
    ladder = _ladder()
    base, same = None, 0
    keep: frozenset[str] = none
    for i, c in enumerate(ladder):
        p = full if c == 1.0 else _probe(path, c, min_dim)
        if c < 1 and not accepts(p):
            # the model rejects some scaled size: scale only the globals it allows
            q = _probe(path, c, min_dim, keep=keep) if keep else None
            if q is None or not accepts(q):
                k = _keep_for(path, c, min_dim, accepts)
                q = _probe(path, c, min_dim, keep=k) if k else None
                keep = k or keep
            if q is not None and accepts(q):
                p = q
                notes["partial_scaling"] = (
                    f"at scale {c:g} the model rejects {', '.join(sorted(q.keep))} scaled: "
                    f"kept unscaled")
        if p.largest < 0:
            continue
        if p.largest <= limit and accepts(p):
            notes.setdefault("_largest", {})[(c, p.keep)] = p.largest
            if not p.keep:
                notes.pop("partial_scaling", None)
            return [(c, {}, p.keep)] + [(x, {}, p.keep) for x in ladder[i + 1:i + 3]]
        same = same + 1 if base is not None and p.largest == base.largest else 0
        if base is None or (p.largest <= base.largest and accepts(p)):
            base = p
        if same >= 3:  # the size globals do not move the largest tensor: literal sizes
            break
    if base is None:
        # nothing builds on the meta device (construction needs data): build for real from the
        # smallest factor up, keeping the largest that fits
        best = None
        for c in reversed(ladder):
            p = _probe(path, c, min_dim, device="cpu")
            if p.largest < 0:
                continue
            if p.largest > limit:
                break
            best = p
        if best is None:
            raise RuntimeError(f"{path.name}: does not build at any factor from 1 down to "
                               f"{MIN_FACTOR:g} within {limit} elements (on the meta device: "
                               f"{full.error})")
        notes.setdefault("_largest", {})[(best.scale, none)] = best.largest
        notes["probed_on"] = "cpu"
        return [(best.scale, {}, none)]
    if not base.keep:
        notes.pop("partial_scaling", None)
    shapes, p = _shrink_inputs(path, base, limit, min_dim)
    if p.largest > limit:
        why = (f"{path.name}: cannot fit the largest tensor into {limit} elements: {p.largest} "
               f"at factor {base.scale:g} (sizes written as literals that neither scaling the "
               f"size globals nor halving batch and spatial input dimensions reaches"
               + (f"; the meta forward pass failed: {base.error}" if base.error else "") + ")")
        if p.largest > max_elements or not accepts(p):
            raise RuntimeError(why + f", and over the cap of {max_elements} elements"
                               if p.largest > max_elements else why)
        # the smallest the model accepts, within the cap: extracted there, the miss recorded
        notes["target_missed"] = (f"the smallest size the model accepts has a largest tensor of "
                                  f"{p.largest} elements, over the target {limit}")
    if shapes:
        notes["shrunk_inputs"] = [[list(o), list(n)] for o, n in sorted(shapes.items())]
    notes.setdefault("_largest", {})[(base.scale, base.keep)] = p.largest
    return [(base.scale, shapes, base.keep)]


def problem_workload(path: str | Path, scale: "float | str | Scale" = 1.0,
                     tiny_scale: float | None = 0.25, min_dim: int = 16, prefix: str = "",
                     max_elements: int = DEFAULT_MAX_ELEMENTS) -> Workload:
    """One workload for one KernelBench-style problem file.

    ``scale``: a factor, ``elements=N`` or ``seconds=T`` (:func:`parse_scale`). Sizes:
    ``default`` uses ``scale``; ``tiny`` uses ``min(scale, tiny_scale)`` for a factor
    (``tiny_scale`` None, or a target form: same as ``default``). The rules are in the module
    docstring; what was used is in ``meta["applied_scale"]`` and ``meta["scale_used"]``.
    """
    path = Path(path)
    sc = parse_scale(scale)
    tiny = sc if (tiny_scale is None or sc.kind != "factor") else \
        Scale("factor", min(sc.value, tiny_scale))
    meta: dict[str, Any] = {"source": str(path), "applied_scale": {}, "scaled_globals": {},
                            "scale_used": {}}

    def attempt(s: float, shapes: dict, keep: frozenset, validate: bool):
        model, inputs, changed = _instantiate(path, s, min_dim, shapes, keep)
        model, inputs, notes = _materialize(model, inputs)
        if validate or notes:
            try:
                with torch.no_grad():
                    model.eval()(*inputs)
                    if "scalar_inputs" in notes:  # int(s), range(s): eager runs, export fails
                        torch.export.export(model, inputs)
            except Exception:
                if "scalar_inputs" not in notes:
                    raise
                # the float is used as a Python number (a size, a branch): bind it instead
                model, inputs, changed = _instantiate(path, s, min_dim, shapes, keep)
                model, inputs, notes = _materialize(model, inputs, floats_as_constants=True)
                with torch.no_grad():
                    model.eval()(*inputs)
        return model, inputs, changed, notes

    def build(p: dict[str, Any], g: torch.Generator):
        want: Scale = p["scale"]
        size = p.get("_size", "?")
        rng_state = torch.random.get_rng_state()  # Workload.build seeded it: same per attempt
        notes: dict[str, Any] = {"form": str(want)}
        cands = _candidates(path, want, min_dim, max_elements, notes)
        if want.kind == "seconds":
            s0, sh0, k0 = cands[0]
            cands = [_fit_time(path, want.value, s0, sh0, min_dim, rng_state, notes, k0)] \
                + cands[1:]
        errors = []
        for s, shapes, keep in cands:
            torch.random.set_rng_state(rng_state)
            try:
                model, inputs, changed, mnotes = attempt(s, shapes, keep, s < 1 or bool(shapes))
                break
            except Exception as e:  # noqa: BLE001 - try the next candidate
                if s >= 1 and want.kind == "factor" and want.value >= 1:
                    raise
                errors.append(f"scale {s:g}: {type(e).__name__}: {e}"[:300])
        else:
            raise RuntimeError(f"{path}: could not build at any scale tried: {errors}"
                               + (f"; {notes['not_tried']}" if notes.get("not_tried") else ""))
        # the largest tensor, where the meta probe measured the candidate that was built
        largest = notes.pop("_largest", {}).get((s, keep))
        if largest is not None:
            notes["largest_elements"] = largest
        meta["applied_scale"][size] = s if changed else 1.0
        meta["scaled_globals"][size] = {k: v[1] for k, v in changed.items()}
        if keep and changed:
            notes["kept_globals"] = sorted(keep)
        else:
            notes.pop("partial_scaling", None)
        notes.update(mnotes)
        notes["factor"] = meta["applied_scale"][size]
        notes["input_shapes"] = [list(x.shape) for x in inputs]
        meta["scale_used"][size] = notes
        if errors:
            meta.setdefault("scale_fallbacks", []).extend(errors)
        return model, inputs

    return Workload(name=_problem_name(path, prefix), suite="user", family="problem",
                    factory=build,
                    sizes={"default": {"scale": sc, "_size": "default"},
                           "tiny": {"scale": tiny, "_size": "tiny"}},
                    dtypes=ALL_FLOAT, description=f"KernelBench-style problem {path.name}",
                    meta=meta)


def _fit_time(path: Path, seconds: float, s: float, shapes: dict, min_dim: int, rng_state,
              notes: dict, keep: frozenset = frozenset()) -> tuple[float, dict, frozenset]:
    """Halve the factor until one PyTorch forward pass (after a warm-up) takes ``seconds``."""
    import time

    while True:
        torch.random.set_rng_state(rng_state)
        model, inputs, _ = _instantiate(path, s, min_dim, shapes, keep)
        model, inputs, _ = _materialize(model, inputs)
        with torch.no_grad():
            model.eval()(*inputs)
            t0 = time.perf_counter()
            model(*inputs)
            took = time.perf_counter() - t0
        notes["forward_seconds"] = round(took, 6)
        if took <= seconds or s / 2 < MIN_FACTOR:
            return s, shapes, keep
        s /= 2


#: folders of problem files that ship with steptp's source (its own examples and test
#: fixtures): ``steptp extract --problems`` runs these without ``--trust``
OWN_PROBLEM_FOLDERS = ("benchmarks/problems", "tests/fixtures")


def untrusted_problems(directory: str | Path, pattern: str = "*.py") -> list[Path]:
    """The problem files in ``directory`` that are not steptp's own examples (folders under
    ``OWN_PROBLEM_FOLDERS`` of the source tree steptp was imported from, symbolic links
    resolved): running them needs the user's explicit trust."""
    root = Path(__file__).resolve().parents[2]
    own = [(root / f).resolve() for f in OWN_PROBLEM_FOLDERS]
    d = Path(directory).resolve()
    files = sorted(p for p in d.glob(pattern) if p.is_file() and is_problem_file(p))
    return [p for p in files
            if not any(p.resolve().is_relative_to(o) for o in own)]


def load_problems(directory: str | Path, scale: "float | str | Scale" = 1.0,
                  tiny_scale: float | None = 0.25, min_dim: int = 16, pattern: str = "*.py",
                  prefix: str = "", register: bool = False,
                  max_elements: int = DEFAULT_MAX_ELEMENTS) -> list[Workload]:
    """One workload per problem file in ``directory`` (sorted by file name; files that do not
    define ``class Model``, ``get_inputs`` and ``get_init_inputs`` are skipped)."""
    d = Path(directory)
    if not d.is_dir():
        raise NotADirectoryError(f"problems folder {directory!r} not found")
    files = sorted(p for p in d.glob(pattern) if p.is_file() and is_problem_file(p))
    if not files:
        raise FileNotFoundError(f"no problem files (class Model, get_inputs, get_init_inputs) "
                                f"in {directory!r}")
    sc = parse_scale(scale)
    out = [problem_workload(p, scale=sc, tiny_scale=tiny_scale, min_dim=min_dim,
                            prefix=prefix, max_elements=max_elements) for p in files]
    if register:
        from steptp.zoo import workloads

        for w in out:
            workloads.register(w)
    return out
