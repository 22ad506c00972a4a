"""Speed of light: the fastest a kernel can possibly run on the fingerprinted machine.

A timing below what the kernel's arithmetic and compulsory memory traffic allow is not a fast
kernel, it is a broken measurement or a trick (work deferred outside the timed call, a result
cached between calls, an output that was never computed). Such a timing is marked ``suspect``
and never labelled as an improvement.

The machine's peaks are measured once per fingerprint with two calibration kernels built and
timed by the ordinary protocol, and cached in ``<cache dir>/roofline/<fingerprint>.json``:

* ``peak_flops``: independent multiply-add chains in vector registers on every core;
* ``peak_bytes_s``: a vectorized copy whose buffers fit in the L2 caches (kernels timed in a
  loop run from cache, so DRAM bandwidth would not be a bound).

A kernel's speed of light is ``max(flops / peak_flops, bytes / peak_bytes_s) / HEADROOM``:
``HEADROOM`` (6) allows for calibration kernels far from the hardware's limits: on the 2-core
Sapphire Rapids machines of this project the FMA kernel reaches 99 GFLOP/s, about a fifth of
the 2 cores x 16 lanes x 2 FMA units x 2 flops x 3.8 GHz = 486 GFLOP/s that no code can beat.
A timing whose median is below the speed of light is suspect.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from ..lru import LRU

HEADROOM = 6.0


def _calibration_kernels(threads: int) -> dict[str, str]:
    c = max(2, 8 * threads)
    fma = f"""kernel f32 peak_fma(A[{c},8,16]) -> D[{c},8,16]
  for c in {c} parallel:
    for t in 8:
      for j in 16 vectorized:
        D[c,t,j] = A[c,t,j]
    for r in 2048:
      for t in 8 unrolled:
        for j in 16 vectorized:
          D[c,t,j] = D[c,t,j] * 0.999 + 0.001
"""
    rows = 2048 * max(1, threads)  # 128 KiB in + 128 KiB out per core
    copy = f"""kernel f32 peak_copy(A[{rows},16]) -> D[{rows},16]
  for i in {rows} parallel:
    for j in 16 vectorized:
      D[i,j] = A[i,j]
"""
    return {"flops": fma, "bytes": copy}


class Peaks(BaseModel):
    fingerprint: str
    peak_flops: float
    peak_bytes_s: float
    headroom: float = HEADROOM


def speed_of_light_s(flops: float, bytes_moved: float, peaks: Peaks) -> float:
    """The least time a kernel of ``flops`` operations and ``bytes_moved`` compulsory bytes can
    take (see the module docstring)."""
    return max(flops / peaks.peak_flops, bytes_moved / peaks.peak_bytes_s) / peaks.headroom


#: ``program_work`` of texts: every timing of a search is checked against the speed of light,
#: a parse and an analysis of a few ms on the search process's thread. Bounded.
_WORK: "LRU[tuple[float, float] | None]" = LRU(256)
_MISSING = object()


def program_work(program: Any) -> tuple[float, float] | None:
    """(flops, compulsory bytes) of a LEIR program or text; None for other kernels."""
    from ..leir import ast as A
    from ..leir import parse
    from ..leir.analysis import analyze

    if isinstance(program, str):
        hit = _WORK.get(program, _MISSING)
        if hit is not _MISSING:
            return hit
    try:
        prog = program if isinstance(program, A.Program) else parse(program)
    except Exception:  # noqa: BLE001 - TVMScript or unparsable: no speed of light
        out = None
    else:
        an = analyze(prog)
        out = float(an.flops), float(an.bytes_moved)
    if isinstance(program, str):
        _WORK.put(program, out)
    return out


def suspect_reason(program: Any, median_s: float, peaks: Peaks | None) -> str | None:
    """Why a timing of ``program`` is impossible on this machine, or None."""
    if peaks is None:
        return None
    work = program_work(program)
    if work is None:
        return None
    sol = speed_of_light_s(*work, peaks)
    if median_s < sol:
        return (f"median {median_s:.3g} s is below the speed of light {sol:.3g} s "
                f"({work[0]:.3g} flops at {peaks.peak_flops:.3g} flop/s, {work[1]:.3g} bytes at "
                f"{peaks.peak_bytes_s:.3g} B/s, headroom {peaks.headroom:g})")
    return None


def _path(directory: Path, fingerprint: str) -> Path:
    return directory / "roofline" / f"{fingerprint}.json"


def load_or_calibrate(measurer, directory: Path | None = None, fresh: bool = False,
                      keep: Peaks | None = None) -> Peaks | None:
    """The peaks of ``measurer``'s fingerprint: from the cache folder, else measured now (two
    timings) and saved. None when the calibration kernels cannot be timed (no peaks: no check).

    A calibration taken while the machine was busy underestimates the peaks; so ``fresh=True``
    measures again whatever is saved, and the larger of the new peaks and ``keep``'s is saved
    (the Measurer does this once before it calls a timing suspect). Rates come from each
    calibration kernel's fastest repeat, not its median."""
    from ..leir import parse
    from ..leir.analysis import analyze

    fp = measurer.fingerprint.id
    directory = Path(directory) if directory is not None else _default_dir()
    path = _path(directory, fp)
    if path.exists() and not fresh:
        try:
            return Peaks(**json.loads(path.read_text(encoding="utf-8")))
        except Exception:  # noqa: BLE001 - a corrupt file is measured again
            pass
    kernels = _calibration_kernels(measurer.config.num_threads)
    stats = dict(measurer.stats)  # calibration is not part of the caller's measurements
    # not through the measurement cache: calibration kernels are not programs a cost model
    # should learn from, and a calibration is always measured anew
    outs = measurer.time_many(list(kernels.values()), check_speed_of_light=False, use_cache=False)
    measurer.stats.update(stats)
    if not all(o.ok for o in outs):
        return None
    rates = {}
    for (kind, text), o in zip(kernels.items(), outs):
        an = analyze(parse(text))
        work = an.flops if kind == "flops" else an.bytes_moved
        rates[kind] = work / o.timing.min_s
    peaks = Peaks(fingerprint=fp, peak_flops=max(rates["flops"], keep.peak_flops if keep else 0),
                  peak_bytes_s=max(rates["bytes"], keep.peak_bytes_s if keep else 0))
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(peaks.model_dump(), indent=1), encoding="utf-8")
    os.replace(tmp, path)
    return peaks


def _default_dir() -> Path:
    from .cache import default_path

    return default_path().parent
