"""The ``Workload`` value and the helpers the suite modules share.

``steptp.zoo.workloads`` re-exports ``Workload`` and holds the registry; the suite modules
(``ops``, ``fused``, ``archs``, ``user``, ``leir``) import from here so that importing any one of
them first never meets a half-initialised registry module.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
from torch import nn

SUITES = ("ops", "fused", "arch", "leir", "user")
SIZES = ("tiny", "default")

#: dtype names accepted by ``Workload.build``.
DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
}
#: what most workloads allow; TVM's LLVM target legalizes and runs all three on x86.
ALL_FLOAT = ("float32", "float16", "bfloat16")
FP32_ONLY = ("float32",)


def supported_dtypes(name: str) -> tuple[str, ...]:
    """The dtypes a built-in workload accepts: float32, plus float16/bfloat16 where the whole
    workload imports, compiles and runs on TVM 0.27's LLVM target and matches PyTorch eager
    (table in ``_dtype_support.py``, produced by ``whole_model_check`` at tiny size)."""
    from steptp.zoo._dtype_support import LOW_PRECISION

    return ("float32", *LOW_PRECISION.get(name, ()))

# A factory gets the size parameters and a seeded generator and returns (module, inputs), both
# in float32; ``Workload.build`` then seeds the parameters, casts to the dtype and sets eval mode.
Factory = Callable[[dict[str, Any], torch.Generator], "tuple[nn.Module, tuple[Any, ...]]"]


def stable_seed(name: str) -> int:
    """A seed derived from a workload name, the same in every process and on every machine
    (sha256, not Python's salted ``hash()``); fits in 31 bits."""
    return int.from_bytes(hashlib.sha256(name.encode("utf-8")).digest()[:4], "little") & 0x7FFFFFFF


@dataclass(frozen=True)
class Workload:
    """One model to import into TVM: a single operator, a fused chain, a whole architecture or a
    user model -- or a LEIR-native kernel (suite ``leir``, or a user ``.leir`` file), which is its
    own LEIR program and is never imported (``is_leir``, ``leir_program``).

    ``sizes`` maps a preset name (at least ``tiny`` and ``default``) to the parameters the
    ``factory`` understands; ``dtypes`` lists the dtypes ``build`` accepts.
    """

    name: str
    suite: str
    family: str
    factory: Factory = field(repr=False, compare=False)
    sizes: dict[str, dict[str, Any]] = field(compare=False)
    dtypes: tuple[str, ...] = ALL_FLOAT
    description: str = ""
    meta: dict[str, Any] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        if self.suite not in SUITES:
            raise ValueError(f"workload {self.name!r}: suite {self.suite!r} not in {SUITES}")
        missing = [s for s in SIZES if s not in self.sizes]
        if missing:
            raise ValueError(f"workload {self.name!r}: missing size presets {missing}")
        bad = [d for d in self.dtypes if d not in DTYPES]
        if bad:
            raise ValueError(f"workload {self.name!r}: unknown dtypes {bad}")

    @property
    def seed(self) -> int:
        return stable_seed(self.name)

    @property
    def is_leir(self) -> bool:
        """A LEIR-native workload (``steptp.zoo.leir``): a hand-written kernel, not a model."""
        return "leir_template" in self.meta

    def leir_program(self, size: str = "tiny"):
        """The checked LEIR program of a LEIR-native workload at a size preset."""
        if not self.is_leir:
            raise ValueError(f"workload {self.name!r} is a PyTorch model, not a LEIR kernel")
        self.size_params(size)  # a KeyError listing the valid sizes
        return self.meta["leir_template"].program(size)

    def size_params(self, size: str = "tiny") -> dict[str, Any]:
        if size not in self.sizes:
            raise KeyError(f"workload {self.name!r} has no size {size!r}; "
                           f"valid sizes: {sorted(self.sizes)}")
        return dict(self.sizes[size])

    def build(self, size: str = "tiny", dtype: str = "float32") -> tuple[nn.Module, tuple[Any, ...]]:
        """An eval-mode module and its example inputs, deterministic for (name, size, dtype).

        Parameters are initialised under ``torch.manual_seed(seed)`` inside a forked RNG (the
        global RNG state is left untouched); inputs come from a ``torch.Generator`` with the same
        seed. Floating-point parameters, buffers and inputs are cast to ``dtype``; integer inputs
        (token ids, class labels, indices) keep their dtype.
        """
        if dtype not in self.dtypes:
            raise ValueError(f"workload {self.name!r} does not support dtype {dtype!r}; "
                             f"supported: {list(self.dtypes)}")
        params = self.size_params(size)
        tdtype = DTYPES[dtype]
        seed = self.seed
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            gen = torch.Generator().manual_seed(seed)
            module, inputs = self.factory(params, gen)
        module = module.eval()
        if tdtype != torch.float32:
            module = module.to(tdtype)
        inputs = tuple(cast_input(x, tdtype) for x in inputs)
        return module, inputs

    def summary(self) -> dict[str, Any]:
        return {"name": self.name, "suite": self.suite, "family": self.family,
                "sizes": {k: dict(v) for k, v in self.sizes.items()},
                "dtypes": list(self.dtypes), "description": self.description}


def cast_input(x: Any, dtype: torch.dtype) -> Any:
    if isinstance(x, torch.Tensor) and x.is_floating_point() and x.dtype != dtype:
        return x.to(dtype)
    return x


# ----------------------------------------------------------------------------- input helpers
def randn(g: torch.Generator, *shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=g)


def rand(g: torch.Generator, *shape: int, low: float = 0.0, high: float = 1.0) -> torch.Tensor:
    return torch.rand(*shape, generator=g) * (high - low) + low


def randint(g: torch.Generator, high: int, *shape: int, low: int = 0) -> torch.Tensor:
    return torch.randint(low, high, shape, generator=g, dtype=torch.int64)


class Lambda(nn.Module):
    """A parameter-free module wrapping a function of the inputs (single operators)."""

    def __init__(self, fn: Callable[..., Any], name: str = "") -> None:
        super().__init__()
        self.fn = fn
        self._name = name

    def forward(self, *args: Any) -> Any:
        return self.fn(*args)

    def extra_repr(self) -> str:
        return self._name
