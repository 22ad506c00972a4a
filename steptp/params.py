"""The one reading of ``params.yaml``: the CLI's stage commands (``--params``, what ``dvc.yaml``
passes), the Prefect flows and the release id all take their settings from these functions, so
``dvc repro`` and ``steptp release`` build the same thing from the same file.

Each stage reads its own section with its defaults here; nothing else reads params sections.
"""

from __future__ import annotations

import datetime as _dt
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

DEFAULT_NIGHTLY_VERSION = "{version}+nightly.{date}"
DEFAULT_MAX_AGE_HOURS = 20.0


class ParamsError(ValueError):
    """params.yaml is unreadable or holds a bad value (the message names the file and key)."""


def load(path: str | Path | None) -> dict[str, Any]:
    """params.yaml as a dict ({} when ``path`` is None)."""
    if path is None:
        return {}
    import yaml

    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except OSError as e:
        raise ParamsError(f"cannot read {path}: {e.strerror}") from None
    except yaml.YAMLError as e:
        raise ParamsError(f"{path}: not YAML: {e}") from None
    if not isinstance(data, dict):
        raise ParamsError(f"{path}: must be a mapping, not {type(data).__name__}")
    return data


def _section(p: Mapping[str, Any], name: str) -> dict[str, Any]:
    s = p.get(name) or {}
    if not isinstance(s, Mapping):
        raise ParamsError(f"params section {name!r} must be a mapping, not {type(s).__name__}")
    return dict(s)


def seed(p: Mapping[str, Any]) -> int:
    return int(p.get("seed", 0))


# ---------------------------------------------------------------------------- stages
def extract_args(p: Mapping[str, Any]) -> dict[str, Any]:
    e = _section(p, "extract")
    return {"zoo": str(e.get("zoo", "tiny")), "size": str(e.get("size", "tiny")),
            "jobs": max(1, int(e.get("jobs", 1))), "check": bool(e.get("check", True)),
            "memory_limit_mb": int(e["memory_limit_mb"]) if e.get("memory_limit_mb") else None,
            "check_budget_s": float(e.get("check_budget_s", 120.0))}


def search_args(p: Mapping[str, Any]) -> dict[str, Any]:
    """Everything a kernel search takes, and how many kernels (``max_kernels``) and how many at
    once (``jobs``). ``verify_jobs``: compile/verify workers of each search (its next candidates
    are verified ahead while one is timed); ``devices``: ``device_args``."""
    s = _section(p, "search")
    mk = s.get("max_kernels")
    return {"policy": str(s.get("policy", "beam")), "measurements": int(s.get("measurements", 16)),
            "seconds": float(s.get("seconds", 60)), "seed": seed(p),
            "threads": None if s.get("threads") is None else int(s["threads"]),
            "max_actions": None if s.get("max_actions") is None else int(s["max_actions"]),
            "rule": curate_config(p).rule().model_dump(),
            "remeasure_rounds": int(s.get("remeasure_rounds", 3)),
            "remeasure_pairs": int(s.get("remeasure_pairs", 6)),
            "remeasure_seconds": float(s.get("remeasure_seconds", 30)),
            "max_kernels": None if mk is None else int(mk), "jobs": max(1, int(s.get("jobs", 1))),
            "verify_jobs": max(1, int(s.get("verify_jobs", 1))), "devices": device_args(p)}


def runner_args(p: Mapping[str, Any]) -> dict[str, Any]:
    """Where the flows' distributed tasks (kernel searches, CoT batches) run: ``kind`` ``local``
    (threads of the flow's process, ``search.jobs`` at once) or ``dask`` (a ``LocalCluster`` of
    ``workers`` processes, or the running scheduler at ``address``)."""
    r = _section(p, "runner")
    kind = str(r.get("kind", "local"))
    if kind not in ("local", "dask"):
        raise ParamsError(f"runner.kind must be local or dask, not {kind!r}")
    address = r.get("address")
    if address is not None and not str(address).startswith(("tcp://", "tls://", "inproc://")):
        raise ParamsError(f"runner.address {address!r}: a scheduler address, tcp://HOST:PORT")
    workers = int(r.get("workers", 2))
    if workers < 1:
        raise ParamsError(f"runner.workers must be >= 1, got {workers}")
    return {"kind": kind, "workers": workers, "address": None if address is None else str(address),
            "threads_per_worker": max(1, int(r.get("threads_per_worker", 1)))}


def device_args(p: Mapping[str, Any]) -> dict[str, Any] | None:
    """The device fleet timings go to (``devices.tracker``: a TVM RPC tracker ``HOST:PORT``,
    ``devices.key``: the device key its servers registered), or None: this machine's device,
    timings serialized by its device lock."""
    d = _section(p, "devices")
    tracker = d.get("tracker")
    if not tracker:
        return None
    host, sep, port = str(tracker).rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ParamsError(f"devices.tracker {tracker!r}: HOST:PORT of a TVM RPC tracker")
    if not d.get("key"):
        raise ParamsError("devices.key: the RPC key the device servers registered with")
    return {"tracker_host": host, "tracker_port": int(port), "key": str(d["key"]),
            "session_timeout_s": float(d.get("session_timeout_s", 120.0))}


def selection_args(p: Mapping[str, Any]) -> dict[str, Any]:
    """Which kernels a release searches (``steptp.pipeline.choose_kernels``)."""
    s = _section(p, "search")
    ceil = s.get("max_time_ms", 200)
    mk = s.get("max_kernels")
    return {"max_kernels": None if mk is None else int(mk),
            "floor_s": float(s.get("min_time_us", 20)) * 1e-6,
            "ceiling_s": None if ceil is None else float(ceil) * 1e-3,
            "max_per_family": s.get("max_per_family", 3),
            "larger_size": s.get("larger_size", "default"),
            "larger_max_workloads": int(s.get("larger_max_workloads", 12)),
            "measure_candidates": int(s["measure_candidates"]) if s.get("measure_candidates") else None}


def cot_args(p: Mapping[str, Any]) -> dict[str, Any]:
    c = _section(p, "cot")
    out = {"writer": str(c.get("writer", "template")), "seed": int(c.get("seed", seed(p))),
           "max_retries": int(c.get("max_retries", 2)), "cache_dir": c.get("cache_dir")}
    if out["writer"] == "openai":  # an OpenAI-compatible server (vLLM, SGLang, ...)
        out.update(model=c.get("model"), base_url=c.get("base_url"))
    return out


def curate_config(p: Mapping[str, Any]):
    from .curate import CurateConfig

    c = _section(p, "curate")
    c.setdefault("seed", seed(p))
    try:
        return CurateConfig(**c)
    except Exception as e:  # noqa: BLE001 - pydantic names the bad key
        raise ParamsError(f"params section 'curate': {e}") from None


def fingerprint(p: Mapping[str, Any]) -> dict[str, Any]:
    """The hardware fingerprint the search times with (its thread count from ``search``; the
    fleet's device key when ``devices`` names an RPC tracker)."""
    from .measure.fingerprint import current

    a = search_args(p)
    if a["devices"] is not None:
        from .measure.rpc import RPCBackend
        from .tir.build import default_target

        return RPCBackend.from_dict(a["devices"]).fingerprint(
            default_target(), a["threads"] or current().num_threads).to_dict()
    return current(num_threads=a["threads"]).to_dict()


def max_age_s(p: Mapping[str, Any]) -> float | None:
    """How old a cached measurement may be and still be reused (``cache.max_age_hours``;
    null: forever)."""
    c = _section(p, "cache")
    h = c.get("max_age_hours", DEFAULT_MAX_AGE_HOURS)
    if h is None:
        return None
    if float(h) <= 0:
        raise ParamsError(f"cache.max_age_hours must be > 0 or null, got {h}")
    return float(h) * 3600.0


def regression_gate(p: Mapping[str, Any]) -> bool:
    return bool(_section(p, "nightly").get("regression_gate", False))


def publish_git(p: Mapping[str, Any], override: bool | None = None) -> bool:
    """Whether a published release is committed and tagged in git and pushed with DVC
    (``publish.git``, off by default: a release built in a user's checkout must not write to
    their branch); ``override`` (the nightly deployment's flow parameter) wins when given."""
    if override is not None:
        return bool(override)
    v = _section(p, "publish").get("git", False)
    if not isinstance(v, bool):  # a string "false" would read as true
        raise ParamsError(f"publish.git must be true or false, not {v!r}")
    return v


# ---------------------------------------------------------------------------- the build
@dataclass(frozen=True)
class Build:
    """One build of a release: its id and version, and the clock its measurements are dated by.

    ``night``: the UTC date (YYYYMMDD) of a nightly build, else None. ``clock_offset_s``: added
    to the wall clock when measurements are dated and aged (non-zero only for a build of a
    given past or future date: a backfill, or a test of two nights)."""

    name: str
    version: str
    night: str | None = None
    clock_offset_s: float = 0.0

    @property
    def id(self) -> str:
        return f"{self.name}-{self.version}"

    @property
    def nightly(self) -> bool:
        return self.night is not None

    def now(self) -> float:
        return time.time() + self.clock_offset_s

    @property
    def night_start(self) -> float | None:
        """A nightly's first moment (00:00 UTC of its night): timings made before it belong to
        an earlier night and are measured again."""
        if self.night is None:
            return None
        return _parse_date(self.night).timestamp()


def _parse_date(date: str) -> _dt.datetime:
    for fmt in ("%Y%m%d", "%Y-%m-%d", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%dT%H:%M"):
        try:
            return _dt.datetime.strptime(date.rstrip("Z"), fmt).replace(tzinfo=_dt.timezone.utc)
        except ValueError:
            pass
    raise ParamsError(f"date {date!r}: use YYYYMMDD, YYYY-MM-DD or YYYY-MM-DDTHH:MM (UTC)")


def build(p: Mapping[str, Any], nightly: bool = False, date: str | None = None) -> Build:
    """The build of ``p``: ``name-version``; a nightly appends the version pattern
    ``nightly.version`` (default ``{version}+nightly.{date}``) for the run's UTC date, or for
    ``date`` (a backfill: measurements are then dated as if made that day)."""
    name, version = str(p.get("name", "steptp")), str(p.get("version", "0"))
    if not nightly:
        if date is not None:
            raise ParamsError("a date is given only with a nightly build")
        return Build(name, version)
    offset = 0.0
    when = _dt.datetime.now(_dt.timezone.utc)
    if date is not None:
        given = _parse_date(date)
        offset = given.timestamp() - time.time()
        when = given
    night = when.strftime("%Y%m%d")
    pattern = str(_section(p, "nightly").get("version", DEFAULT_NIGHTLY_VERSION))
    try:
        full = pattern.format(version=version, date=night)
    except (KeyError, IndexError, ValueError) as e:
        raise ParamsError(f"nightly.version {pattern!r}: only {{version}} and {{date}} may be "
                          f"used ({e})") from None
    return Build(name, full, night, offset)


__all__ = ["Build", "ParamsError", "build", "cot_args", "curate_config", "device_args",
           "extract_args", "fingerprint", "load", "max_age_s", "publish_git", "regression_gate",
           "runner_args", "search_args", "seed"]
