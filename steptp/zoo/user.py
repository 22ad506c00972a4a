"""User workloads: any ``nn.Module`` factory, and folders of KernelBench-style problem files.

``--model pkg.module:factory --inputs 'f32[1,3,32,32];i64[1,16]'``
    :func:`from_factory` imports ``pkg.module`` with importlib (never ``eval``) and calls
    ``factory()`` with no arguments. It may return an ``nn.Module`` or ``(module, inputs)``;
    ``--inputs`` (parsed by :func:`parse_inputs`) overrides the inputs it returns.
    ``path/to/file.py:factory`` loads a file instead of an importable module.

``--problems DIR [--scale S]``
    :func:`load_problems` makes one workload per ``*.py`` file in DIR that defines
    ``class Model``, ``get_inputs()`` and ``get_init_inputs()`` (the KernelBench convention).
    Loading a problem file executes it: it is the user's model, by design.

Input spec grammar (``parse_inputs``): tensors separated by ``;``, each ``DTYPE[D0,D1,...]`` with
an optional value range ``@LO:HI``::

    f32[1,3,32,32]            standard normal float32
    f32[4,8]@0:1              uniform in [0, 1)
    i64[1,16]@0:32000         integers in [0, 32000)   (integer default range: [0, 100))
    bool[1,16]                random booleans; f32[] is a 0-d tensor

DTYPE is one of f16 bf16 f32 f64 i8 i16 i32 i64 u8 bool (or the torch names float32, int64, ...).

Scaling problems down (``scale < 1``) — what exactly happens:
  1. The problem file is executed afresh (its own module object) for every build.
  2. Every *module-level global* of the file whose value is an ``int`` (not ``bool``) with
     ``abs(value) >= min_dim`` (default 16), or a tuple/list of ints, is replaced by
     ``max(1, round(value * scale))`` element by element; a value that was a multiple of 8 is
     rounded to a multiple of 8 (at least 8) so that alignment and divisibility by small
     head/group counts survive. Smaller ints (kernel sizes, strides, padding, dilation, the
     ``dim`` to reduce over, groups and head counts below ``min_dim``), floats, bools and
     strings are left alone.
  3. ``get_init_inputs()``, ``Model(*init_inputs)`` and ``get_inputs()`` are then called; they
     read the scaled globals at call time.
  4. The scaled model is run once on the scaled inputs. If construction or that forward pass
     fails, the next larger scale in ``scale, sqrt(scale), 1`` is tried; the scale actually used
     is recorded in ``workload.meta["applied_scale"][size]`` (1.0 means unscaled).
  Where it does not apply: sizes written as literals inside ``get_inputs``/``get_init_inputs``
  or ``Model`` (``torch.randn(16, 1024)``), sizes computed inside those functions from
  unscaled values, sizes held in floats, strings or dicts, and constraints between a scaled and
  an unscaled number (``hidden = 48`` with ``num_heads = 12``: 48 -> 12 is still divisible,
  but e.g. 40 -> 10 with 4 heads is not) -- those fall back to a larger scale or run unscaled.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import math
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any, Callable

import torch
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


def scale_globals(module: ModuleType, scale: float, min_dim: int = 16) -> dict[str, tuple[Any, Any]]:
    """Shrink the module-level integer size constants of a problem module in place (rule in the
    module docstring); returns ``{name: (old, new)}`` for the globals it changed."""
    changed: dict[str, tuple[Any, Any]] = {}
    if scale >= 1:
        return changed
    for key, val in list(vars(module).items()):
        if key.startswith("_") or isinstance(val, bool):
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


def _instantiate(path: Path, scale: float, min_dim: int) -> tuple[nn.Module, tuple, dict]:
    module = _load_file_module(path)
    for attr in ("Model", "get_inputs", "get_init_inputs"):
        if not hasattr(module, attr):
            raise AttributeError(f"problem file {path} defines no {attr}")
    changed = scale_globals(module, scale, min_dim)
    init = module.get_init_inputs()
    init = list(init) if isinstance(init, (list, tuple)) else [init]
    model = module.Model(*init)
    inputs = module.get_inputs()
    inputs = (inputs,) if isinstance(inputs, torch.Tensor) else tuple(inputs)
    inputs = tuple(x.detach().cpu() if isinstance(x, torch.Tensor) else x for x in inputs)
    return model.cpu(), inputs, changed


def problem_workload(path: str | Path, scale: float = 1.0, tiny_scale: float | None = 0.25,
                     min_dim: int = 16, prefix: str = "") -> Workload:
    """One workload for one KernelBench-style problem file.

    Sizes: ``default`` uses ``scale``; ``tiny`` uses ``min(scale, tiny_scale)`` (``tiny_scale``
    None: same as ``default``). Scaling and its limits are described in the module docstring.
    """
    path = Path(path)
    if not 0 < scale <= 1:
        raise ValueError(f"scale must be in (0, 1], got {scale}")
    tiny = scale if tiny_scale is None else min(scale, tiny_scale)
    meta: dict[str, Any] = {"source": str(path), "applied_scale": {}, "scaled_globals": {}}

    def build(p: dict[str, Any], g: torch.Generator):
        requested = float(p["scale"])
        candidates = [requested] if requested >= 1 else \
            sorted({requested, math.sqrt(requested), 1.0})
        errors = []
        rng_state = torch.random.get_rng_state()  # Workload.build seeded it: same per attempt
        for s in candidates:
            torch.random.set_rng_state(rng_state)
            try:
                model, inputs, changed = _instantiate(path, s, min_dim)
                if s < 1:  # validate the scaled model with one forward pass
                    with torch.no_grad():
                        model.eval()(*inputs)
            except Exception as e:  # noqa: BLE001 - try a larger scale
                if s >= 1:
                    raise
                errors.append(f"scale {s:g}: {type(e).__name__}: {e}")
                continue
            meta["applied_scale"][p.get("_size", "?")] = s if changed else 1.0
            meta["scaled_globals"][p.get("_size", "?")] = {k: v[1] for k, v in changed.items()}
            if errors:
                meta.setdefault("scale_fallbacks", []).extend(errors)
            return model, inputs
        raise RuntimeError(f"{path}: could not build at any scale: {errors}")

    return Workload(name=_problem_name(path, prefix), suite="user", family="problem",
                    factory=build,
                    sizes={"default": {"scale": scale, "_size": "default"},
                           "tiny": {"scale": tiny, "_size": "tiny"}},
                    dtypes=ALL_FLOAT, description=f"KernelBench-style problem {path.name}",
                    meta=meta)


def load_problems(directory: str | Path, scale: float = 1.0, tiny_scale: float | None = 0.25,
                  min_dim: int = 16, pattern: str = "*.py", prefix: str = "",
                  register: bool = False) -> list[Workload]:
    """One workload per problem file in ``directory`` (sorted by file name; files that do not
    define ``class Model``, ``get_inputs`` and ``get_init_inputs`` are skipped)."""
    d = Path(directory)
    if not d.is_dir():
        raise NotADirectoryError(f"problems folder {directory!r} not found")
    files = sorted(p for p in d.glob(pattern) if p.is_file() and is_problem_file(p))
    if not files:
        raise FileNotFoundError(f"no problem files (class Model, get_inputs, get_init_inputs) "
                                f"in {directory!r}")
    out = [problem_workload(p, scale=scale, tiny_scale=tiny_scale, min_dim=min_dim,
                            prefix=prefix) for p in files]
    if register:
        from steptp.zoo import workloads

        for w in out:
            workloads.register(w)
    return out
