"""The ``steptp`` command. Each subcommand's --help says what it reads and writes."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

app = typer.Typer(
    add_completion=False, no_args_is_help=True, rich_markup_mode=None,
    help="Build Step-TP datasets: verified, measured, explained step-level tensor-program "
         "optimizations. Programs are LEIR text (see docs/leir.md).")
console = Console()


def _listing_console() -> Console:
    """Where tables go: on a terminal they fit its width; piped or redirected (``| grep``,
    ``> file``) nothing is cut (rich would assume 80 columns and elide names)."""
    if console.is_terminal:
        return console
    return Console(width=100_000, color_system=None, soft_wrap=True)


def _err(message: str) -> None:
    """An error for the user: plain text on stderr (no markup, no wrapping, so subscripts like
    [i] and quoted source lines come out exactly)."""
    typer.echo(message, err=True)


def _read(path: Path) -> str:
    from .leir.parser import LeirSyntaxError, decode

    try:
        return decode(path.read_bytes())
    except OSError as e:
        raise typer.BadParameter(f"cannot read {path}: {e.strerror}") from None
    except LeirSyntaxError as e:   # bytes that are not UTF-8
        _err(f"{path}: {e}")
        raise typer.Exit(2) from None


def _load_program(path: Path, what: str = "program"):
    """Parse and check a LEIR file, exiting with the positioned errors on failure."""
    from .leir import LeirSyntaxError, check, parse
    from .leir.check import LeirCheckError

    try:
        prog = parse(_read(path))
        check(prog)
        return prog
    except (LeirSyntaxError, LeirCheckError) as e:
        _err(f"{path}: invalid {what}:\n{e}")
        raise typer.Exit(2) from None


def _target(name: str):
    from .tir.target import Target

    if name == "cpu":
        return Target.host_cpu()
    if name == "cuda":
        return Target.cuda()
    raise typer.BadParameter(f"unknown target {name!r}: use cpu or cuda")


@app.command()
def parse(file: Path = typer.Argument(..., help="a LEIR file"),
          hash: bool = typer.Option(False, "--hash", help="also print the canonical hash"),
          rename: bool = typer.Option(False, "--rename",
                                      help="apply the canonical renaming (A, B, ..., T0, ..., i, j, ...)")):
    """Check a LEIR program and print its canonical text."""
    from .leir import format_program
    from .leir.canon import canonical_hash, canonicalize

    prog = _load_program(file)
    if rename:
        prog, _ = canonicalize(prog)
    sys.stdout.write(format_program(prog))
    if hash:
        print(f"# hash {canonical_hash(prog)}")


@app.command()
def check(file: Path = typer.Argument(..., help="a LEIR file")):
    """Check names, shapes, dtypes, ranks, constant subscripts and writes; print every error.

    The file must be UTF-8, at most 1 MiB, nested at most 1000 levels deep
    (steptp/leir/parser.py: MAX_BYTES, MAX_DEPTH); beyond, the error names the line and column.
    """
    _load_program(file)
    console.print(f"{file}: ok")


@app.command()
def lower(file: Path = typer.Argument(..., help="a LEIR file"),
          target: str = typer.Option("cpu", help="cpu (LLVM, host CPU) or cuda")):
    """Print the TVM TIR PrimFunc (TVMScript) a LEIR program lowers to."""
    from .tir.lower import LowerError, lower as do_lower

    prog = _load_program(file)
    try:
        print(do_lower(prog, _target(target)).script())
    except LowerError as e:
        _err(f"{file}: cannot lower for {target}: {e}")
        raise typer.Exit(2) from None


@app.command()
def verify(candidate: Path = typer.Argument(..., help="the candidate LEIR program"),
           reference: Path = typer.Option(..., "--reference", "-r",
                                          help="a LEIR program, or TVMScript of a PrimFunc (.py)"),
           exactness: str = typer.Option("exact", help="tolerance class: exact, reassociation, algebraic"),
           seeds: str = typer.Option("0,1,2,3,4", help="comma-separated input seeds; seed s draws "
                                     "its floats from distribution s % 5: standard normal, uniform "
                                     "positive, large magnitude, small magnitude, mixed signs"),
           target: str = typer.Option("cpu", help="cpu or cuda"),
           as_json: bool = typer.Option(False, "--json", help="print the result as JSON")):
    """Build candidate and reference, run both on seeded inputs, compare element by element.

    An element passes when |candidate - reference| <= atol + rtol*|reference| + 2*bound, with
    (atol, rtol) fixed per class and dtype (steptp/measure/verify.py: TOLERANCES) and bound the
    reference's own rounding-error bound for that element (steptp/measure/error_bound.py).
    Outputs are pre-filled with NaN, so an element the candidate never writes fails; a
    candidate also fails when a parallel loop may race (two of its iterations touch one element,
    one writing it: decided symbolically at any size, exactly by enumeration on small loops, a
    non-affine subscript counting as a race; a parallel candidate is also run with 2 and 4
    threads), when it writes an input, or when an output depends on what its buffer held
    before the call. The reason names the output and its first
    wrong element. Exit code 0 when it passes, 1 when it does not, 2 on invalid input.
    """
    import os

    from .measure.verify import TOLERANCES, verify as do_verify

    if exactness not in TOLERANCES:
        raise typer.BadParameter(f"unknown exactness {exactness!r}; use one of {', '.join(TOLERANCES)}")
    try:
        seed_list = tuple(int(s) for s in seeds.split(",") if s.strip())
    except ValueError:
        raise typer.BadParameter(f"--seeds must be integers separated by commas, got {seeds!r}") from None
    cand = _load_program(candidate, "candidate")
    if reference.suffix == ".py":
        import tvm

        try:
            ref = tvm.script.from_source(_read(reference))
        except Exception as e:  # noqa: BLE001 - TVM's parser raises several kinds
            _err(f"{reference}: not a TVMScript PrimFunc: {e}")
            raise typer.Exit(2) from None
        if isinstance(ref, tvm.IRModule):
            ref = ref["main"]
    else:
        ref = _load_program(reference, "reference")
    # not TVM_NUM_THREADS: TVM sizes its pool once per process from it, so raising it here
    # would leave every later timing in this process on more threads than cores; the
    # threaded race runs use as many threads as the pool has (verify.RACE_THREADS)
    res = do_verify(cand, ref, exactness=exactness, target=_target(target), seeds=seed_list)
    if as_json:
        print(json.dumps(res.to_dict() if hasattr(res, "to_dict") else res.model_dump(), indent=2))
    else:
        status = "[green]PASS[/green]" if res.passed else "[red]FAIL[/red]"
        console.print(f"{status} {escape(str(candidate))} vs {escape(str(reference))} ({exactness}): "
                      f"max abs err {res.max_abs_err:.3g}, max rel err {res.max_rel_err:.3g}"
                      + ("" if res.passed else f"\n  {escape(str(res.reason))}"))
    raise typer.Exit(0 if res.passed else 1)


@app.command()
def v1(corpus: Optional[Path] = typer.Option(None, help="a Step-TP v1 JSONL corpus"),
       workload: Optional[str] = typer.Option(None, help="print only this workload"),
       bind_as: str = typer.Option("thread", help="v1 bound loops become GPU thread loops "
                                                  "('thread') or serial loops ('serial', for CPU)")):
    """Read Step-TP v1 programs (one JSON object per line) and print them as LEIR."""
    from .leir import format_program
    from .leir.v1 import read_v1

    path = corpus or Path(__file__).resolve().parents[2] / "shared" / "data" / "steptp-v1-leir-corpus.jsonl"
    if not path.exists():
        raise typer.BadParameter(f"no corpus at {path}; pass --corpus")
    n = 0
    for lineno, line in enumerate(_read(path).splitlines(), 1):
        if not line.strip():
            continue
        row = json.loads(line)
        if workload and row.get("workload") != workload:
            continue
        sig = {k: row.get(k) or {} for k in ("inputs", "constants", "params", "outputs")}
        try:
            prog = read_v1(row["leir_v1"], sig, name=row.get("workload", "kernel"), bind_as=bind_as)
        except ValueError as e:
            _err(f"{path}:{lineno}: {e}")
            continue
        sys.stdout.write(format_program(prog) + "\n")
        n += 1
    if n == 0:
        _err("no program printed")
        raise typer.Exit(1)


@app.command()
def demo():
    """The main job for now: every bundled example through parse, check, lower, build, verify
    (against TVM and against the NumPy interpreter), with token figures."""
    from .demo import run_demo

    rows = run_demo()
    table = Table(title="steptp demo: bundled example kernels on the host CPU (LLVM)")
    for col in ("kernel", "result", "LEIR tok", "TVMScript tok", "ratio", "max |TVM-NumPy|", "s"):
        table.add_column(col, justify="right" if col != "kernel" else "left")
    for r in rows:
        ratio = f"{r.leir_tokens / r.tvmscript_tokens:.2f}" if r.tvmscript_tokens else "-"
        table.add_row(r.name, "[green]ok[/green]" if r.ok else f"[red]FAIL[/red] {escape(r.error[:60])}",
                      str(r.leir_tokens), str(r.tvmscript_tokens), ratio,
                      f"{r.max_abs_err_vs_numpy:.2g}", f"{r.seconds:.2f}")
    _listing_console().print(table)
    failed = [r for r in rows if not r.ok]
    for r in failed:
        _err(f"{r.name}: {r.error}")
    console.print(f"{len(rows) - len(failed)}/{len(rows)} kernels parsed, checked, lowered, built "
                  f"and verified")
    raise typer.Exit(1 if failed else 0)


@app.command()
def extract(
        zoo: Optional[str] = typer.Option(
            None, "--zoo", help="a suite (tiny, ops, fused, arch, leir, default, all) or workload "
                                "names separated by commas, e.g. 'gemv,softmax,bert'"),
        model: Optional[str] = typer.Option(
            None, "--model", help="a user model: pkg.module:factory or path/to/file.py:factory "
                                  "(returns an nn.Module, or (module, inputs))"),
        inputs: Optional[str] = typer.Option(
            None, "--inputs", help="input spec for --model, e.g. 'f32[1,3,32,32];i64[1,16]@0:1000'"),
        problems: Optional[Path] = typer.Option(
            None, "--problems", help="a folder of KernelBench-style problem files "
                                     "(class Model, get_inputs, get_init_inputs). They are Python "
                                     "code and steptp EXECUTES them (in contained workers); a "
                                     "folder from outside steptp's own examples needs --trust"),
        trust: bool = typer.Option(
            False, "--trust", help="run the --problems files: you have read them or trust their "
                                   "source. steptp runs them in workers without network access, "
                                   "with read-only files and, when run as root, as user nobody; "
                                   "they can still read what you can read"),
        leir: Optional[list[str]] = typer.Option(
            None, "--leir", help="your own LEIR kernels: a .leir file (plain LEIR or a LEIR "
                                 "template, see docs/zoo-leir.md) or a folder of them; repeat the "
                                 "option or separate paths with commas. Alone, or added to "
                                 "--zoo/--model/--problems"),
        scale: str = typer.Option(
            "1", "--scale", help="scale --problems sizes: a factor in (0, 1] (every size global "
                                 "times it), 'elements=N' (each problem scaled so its largest "
                                 "tensor has at most N elements, e.g. elements=1M; literal input "
                                 "sizes shrink where the model accepts it) or 'seconds=T' (its "
                                 "PyTorch forward pass takes at most T s)"),
        memory_limit: Optional[int] = typer.Option(
            None, "--memory-limit", help="MB of memory per worker (default or 0: an equal share "
                                         "of 80% of the machine per job; --jobs is lowered if the "
                                         "workers together would exceed it)"),
        check_budget: Optional[float] = typer.Option(
            None, "--check-budget", help="seconds allowed for one kernel's raise check; a kernel "
                                          "estimated (FLOPs, bytes) to need more is checked on a "
                                          "reduced problem or skipped with the reason (default 120)"),
        scan_timeout: Optional[float] = typer.Option(
            None, "--scan-timeout", help="seconds allowed for scanning one workload (default 60 "
                                         "for problem files and --model, 600 for the zoo)"),
        problem_check_budget: Optional[float] = typer.Option(
            None, "--problem-check-budget",
            help="seconds of raise checks per problem file, planned from each kernel's estimate "
                 "before any runs; the kernels that do not fit are recorded check-skipped "
                 "(default 30; 0: no per-problem bound)"),
        log: Optional[Path] = typer.Option(
            None, "--log", help="progress log, a line per finished workload and kernel check "
                                "(default: OUT with the suffix .log)"),
        size: Optional[str] = typer.Option(None, "--size", help="size preset of zoo workloads: tiny "
                                                                "(the default) or default"),
        dtype: str = typer.Option("float32", "--dtype", help="float32, float16 or bfloat16"),
        out: Path = typer.Option(Path("kernels.parquet"), "--out", "-o",
                                 help="the kernels table (parquet); the summary goes next to it "
                                      "as NAME.summary.json"),
        jobs: Optional[int] = typer.Option(None, "--jobs", "-j", min=1,
                                           help="worker processes (one workload or kernel per task; "
                                                "default 1)"),
        params: Optional[Path] = typer.Option(
            None, "--params", help="params.yaml: zoo, size, jobs and check from its 'extract' "
                                   "section (what dvc.yaml passes; options given here win)"),
        model_check: bool = typer.Option(False, "--model-check",
                                         help="also compile each whole model with TVM and compare "
                                              "it with PyTorch eager (recorded in the summary)"),
        no_check: bool = typer.Option(False, "--no-check",
                                      help="skip the raise check (lower(raise(f)) == f)")):
    """Extract the kernels of models into a deduplicated kernels table.

    Each workload is exported with torch.export, imported into TVM Relax, fused, and every fused
    PrimFunc is raised to LEIR. LEIR-native kernels (the leir suite, and --leir files) are their
    own LEIR: they are parsed, checked, lowered and built, and compared with the LEIR
    interpreter where that is cheap. Kernels are deduplicated across models by canonical LEIR hash;
    each record lists its occurrences (model, PrimFunc name, calls) and its weight, and says
    whether lower(raise(f)) was checked numerically equal to f. Unsupported operators and
    raise failures are reported per model; the other kernels still come through.

    Problem files (--problems) and --model factories are Python code: extracting them runs
    them. Problem files run in worker processes without network access, on read-only files
    (a private scratch folder aside) and, when steptp runs as root, as user nobody; each
    under a memory limit and a 60 s scan timeout. A folder outside steptp's own examples
    (benchmarks/problems, tests/fixtures) is only run with --trust.

    \b
    Examples:
      steptp extract --zoo tiny --out kernels.parquet --jobs 2
      steptp extract --zoo gemv,softmax,bert --model-check
      steptp extract --model mypkg.nets:make_net --inputs 'f32[1,3,32,32]'
      steptp extract --problems kernelbench/level1 --scale elements=1M --jobs 2 --trust
      steptp extract --leir my_kernels/ --leir extra.leir --out mine.parquet
      steptp extract --zoo leir --size default
      steptp extract --params params.yaml --out build/kernels.parquet

    Exit code 0 when every workload was scanned, 1 when some failed (the table is still
    written), 2 on invalid options or an unreadable --leir file (nothing is written then).
    """
    from .zoo import extract as X
    from .zoo.leir import LeirTemplateError
    from .zoo.workloads import UnknownName

    from_params = None   # the params' workloads (pipeline.extract_refs): zoo, sizes, folders
    if params is not None:
        e = _load_params(params).extract
        if model is None and problems is None and not leir:
            if zoo is None and size is None:
                from_params = e
            zoo = zoo or e.zoo
        size, jobs = size or e.size, jobs or e.jobs
        no_check = no_check or not e.check
        memory_limit = memory_limit or e.memory_limit
        check_budget = e.check_budget_s if check_budget is None else check_budget
    size, jobs = size or "tiny", jobs or 1
    check_budget = 120.0 if check_budget is None else check_budget
    sources = [x for x in (zoo, model, problems) if x is not None]
    if len(sources) > 1 or (not sources and not leir):
        raise typer.BadParameter("give exactly one of --zoo, --model, --problems (--leir may be "
                                 "added to any of them, or used alone)")
    if inputs is not None and model is None:
        raise typer.BadParameter("--inputs goes with --model")
    from .zoo.user import ScaleError, parse_scale

    try:
        parse_scale(scale)
    except ScaleError as e:
        raise typer.BadParameter(f"--scale: {e}") from None
    if size not in ("tiny", "default"):
        raise typer.BadParameter(f"--size must be tiny or default, got {size!r}")
    if dtype not in ("float32", "float16", "bfloat16"):
        raise typer.BadParameter(f"--dtype must be float32, float16 or bfloat16, got {dtype!r}")
    try:
        refs = []
        if from_params is not None:
            from .pipeline import extract_refs

            refs = extract_refs(from_params)
        elif zoo is not None:
            refs = X.refs_for_zoo(zoo, size=size, dtype=dtype)
        elif model is not None:
            refs = X.refs_for_model(model, inputs, size=size, dtype=dtype)
        elif problems is not None:
            from .zoo.user import untrusted_problems

            refs = X.refs_for_problems(problems, scale=scale, size=size, dtype=dtype)
            untrusted = untrusted_problems(problems)
            if untrusted and not trust:
                _err(f"refusing to run {len(untrusted)} problem files from {problems}: problem "
                     f"files are Python code and extracting them executes them ("
                     + ", ".join(p.name for p in untrusted[:5])
                     + (", ..." if len(untrusted) > 5 else "") + "). steptp runs them without "
                     "network access, on read-only files and, as root, as user nobody, but they "
                     "can read what you can read. Read them, then pass --trust to run them.")
                raise typer.Exit(2)
            if untrusted:
                _err(f"--trust: running {len(untrusted)} problem files from {problems} in "
                     f"contained workers")
        if leir:
            refs += X.refs_for_leir(_leir_paths(leir), size=size)
    except LeirTemplateError as e:
        _err(f"cannot read a --leir kernel: {e}")
        raise typer.Exit(2) from None
    except (UnknownName, ValueError, ImportError, AttributeError, TypeError, OSError) as e:
        _err(f"cannot read the workloads: {e}")
        raise typer.Exit(2) from None
    try:
        result = X.extract(refs, jobs=jobs, model_check=model_check, check=not no_check,
                           progress=True, console=Console(stderr=True),
                           memory_limit_mb=memory_limit or None, check_budget_s=check_budget,
                           scan_timeout_s=scan_timeout,
                           problem_check_budget_s=(X.PROBLEM_CHECK_BUDGET_S
                                                   if problem_check_budget is None else
                                                   problem_check_budget or None),
                           log_path=log if log is not None else out.with_suffix(".log"))
    except ValueError as e:
        _err(str(e))
        raise typer.Exit(2) from None
    table_path, summary = X.write(result, out)
    s = result.summary()
    t = Table(title=f"steptp extract: {s['models_tried']} models -> {table_path}")
    show_scale = any(w.get("scale_used") for w in s["workloads"])
    for col in ("model", "kernels", "calls", "unsupported ops", "model check", "s") \
            + (("scale",) if show_scale else ()):
        t.add_column(col, justify="left" if col in ("model", "unsupported ops") else "right")
    for w in s["workloads"]:
        mc = w.get("model_check")
        su = w.get("scale_used") or {}
        scale_col = ((f"{su['factor']:.3g}" + (" +shrunk inputs" if su.get("shrunk_inputs") else "")
                      if su else "-"),) if show_scale else ()
        t.add_row(escape(w["workload"]) + ("" if w["ok"] else " [red](failed)[/red]"), str(w["kernels"]),
                  str(w["calls"]), ", ".join(w["unsupported_ops"]) or "-",
                  "-" if mc is None else ("pass" if mc["passed"] else "[red]FAIL[/red]"),
                  f"{w['seconds']:.1f}", *scale_col)
    _listing_console().print(t)
    for f in s["failures"]:
        what = f.get("op") or f.get("kernel") or ""
        _err(f"{f['workload']}: {f['stage']} {what}: {f['reason']}")
    rate = s["raise_success_rate"]
    console.print(
        f"models tried {s['models_tried']} (ok {s['models_ok']}), kernels found "
        f"{s['kernels_found']}, unique {s['unique_kernels']}, raise ok {s['raise_ok']}"
        + (f" ({100 * rate:.1f}%)" if rate is not None else "")
        + (f", raise failures {s['raise_failures_by_reason']}" if s['raise_failures_by_reason'] else "")
        + (f", model check {s['model_check']['passed']}/{s['model_check']['checked']} passed"
           if s["model_check"] else "")
        + f"; {s['seconds']['total']:.1f} s ({s['seconds_per_model']:.2f} s/model, "
        f"{s['kernels_per_second']:.2f} kernels/s)\nwrote {table_path} and {summary}",
        highlight=False)
    raise typer.Exit(0 if s["models_ok"] == s["models_tried"] else 1)


def _leir_paths(values: list[str]) -> list[Path]:
    """--leir values: each a path, or several separated by commas (a value that exists as a path
    is taken whole, so a file whose name holds a comma still works)."""
    out: list[Path] = []
    for v in values:
        if Path(v).exists() or "," not in v:
            out.append(Path(v))
        else:
            out.extend(Path(p.strip()) for p in v.split(",") if p.strip())
    return out


@app.command()
def kernels(path: Path = typer.Argument(..., help="a kernels table written by steptp extract"),
            limit: int = typer.Option(50, "--limit", "-n", help="rows to print (0: all)")):
    """Print a kernels table: id, name, weight (calls over all models), FLOPs, raise check."""
    from .records import KernelRecord, read_records

    try:
        recs = read_records(path, KernelRecord)
    except Exception as e:  # noqa: BLE001 - polars/pydantic errors: say which file
        _err(f"{path}: not a kernels table: {e}")
        raise typer.Exit(2) from None
    t = Table(title=f"{path}: {len(recs)} kernels")
    t.add_column("id", no_wrap=True, min_width=16)
    t.add_column("name", overflow="fold")
    for col in ("weight", "models", "flops", "bytes"):
        t.add_column(col, justify="right")
    t.add_column("raise")
    for r in recs[: limit or None]:
        t.add_row(r.kernel_id, r.name, str(r.weight), str(len({o.workload for o in r.occurrences})),
                  f"{r.flops:,}", f"{r.bytes_moved:,}",
                  "[green]ok[/green]" if r.raise_ok else f"[red]{escape(r.raise_reason[:40])}[/red]")
    _listing_console().print(t)


@app.command()
def pool(params: Optional[Path] = typer.Option(Path("params.yaml"), "--params",
                                              help="the params file whose pool is shown, e.g. "
                                                   "profiles/standard.yaml"),
         kernels_table: Optional[Path] = typer.Option(
             None, "--kernels", help="a kernels table these params extracted (steptp extract "
                                     "--params): not extracted again"),
         release_dir: Optional[Path] = typer.Option(
             None, "--release", help="a release folder: its searched kernels count as searched"),
         as_json: bool = typer.Option(False, "--json", help="print the summary as JSON")):
    """Print the kernel pool of a params file: kernels per source and per operator family, and
    how many a release has searched, how many are pending and how many are skipped, and why
    (not raised, below the time floor, above the ceiling; decontaminated per folder; duplicates
    folded). With an accumulating profile and --release: how many pending kernels the next
    night's shard makes wait (a shape group searched, a family that yields little). Extracts the params' sources unless --kernels is given (the full standard profile
    takes a while), and ranks on the analytic estimates: nothing is timed."""
    from .params import ParamsError
    from .pool import pool as make_pool
    from .records import KernelRecord, read_records

    s = _load_params(params)
    recs, dups = None, None
    if kernels_table is not None:
        try:
            recs = read_records(kernels_table, KernelRecord)
        except Exception as e:  # noqa: BLE001 - polars/pydantic errors: say which file
            _err(f"{kernels_table}: not a kernels table: {e}")
            raise typer.Exit(2) from None
        summary = kernels_table.with_suffix(".summary.json")
        if summary.exists():
            sm = json.loads(summary.read_text())
            dups = sm.get("kernels_found", 0) - sm.get("unique_kernels", 0)
    try:
        p = make_pool(s, kernels=recs, release=release_dir, duplicates=dups, log=_err,
                      console=Console(stderr=True))
    except (ParamsError, FileNotFoundError) as e:
        _err(str(e))
        raise typer.Exit(2) from None
    sm = p.summary()
    if as_json:
        typer.echo(json.dumps(sm, indent=1))
        return
    out = _listing_console()
    for title, rows in (("source", sm["per_source"]), ("family", sm["per_family"])):
        t = Table(title=f"{params}: kernels per {title}")
        t.add_column(title)
        cols = ("kernels", "searched", "pending", "deferred", "skipped") if sm["deferred"] else \
            ("kernels", "searched", "pending", "skipped")
        for col in cols:
            t.add_column("(of pending) deferred" if col == "deferred" else col, justify="right")
        for name, r in rows.items():
            t.add_row(escape(name), *(str(r[c]) for c in cols))
        out.print(t)
    why = ", ".join(f"{k} {v}" for k, v in sm["skipped_by_reason"].items()) or "none"
    lines = [f"pool: {sm['kernels']} kernels; searched {sm['searched']}, pending "
             f"{sm['pending']}, skipped {sm['skipped']} ({why})"]
    if sm["deferred"]:
        low = [f"{f} ({y['answerable_per_kernel']:.2g} per kernel over {y['kernels']})"
               for f, y in sm["family_yield"].items() if y["deferred"]]
        lines.append(f"the next night's shard makes {sm['deferred']} pending kernels wait ("
                     + ", ".join(f"{k} {v}" for k, v in sm["deferred_by_reason"].items())
                     + f"); families below nightly.min_family_yield: {', '.join(low) or 'none'}")
    if sm["duplicates"] is not None:
        lines.append(f"duplicates folded at extraction: {sm['duplicates']}")
    if sm["decontamination"] is not None:
        for f in sm["decontamination"]["folders"]:
            lines.append(f"decontaminated: {f['dropped']} kernels held by {f['folder']} "
                         f"(exact {f['dropped_by']['exact']}, at another size "
                         f"{f['dropped_by']['shape']}; the folder has {f['kernels']} kernels"
                         + (f", {len(f['failed'])} workloads not extracted" if f["failed"] else "")
                         + ")")
    lines.append("seconds: " + ", ".join(f"{k} {v:g}" for k, v in sm["seconds"].items()))
    for line in lines:
        out.print(escape(line), highlight=False)


@app.command()
def cot(steps: Path = typer.Option(..., "--steps", help="a steps table (parquet of StepRecord)"),
        out: Path = typer.Option(..., "--out", "-o",
                                 help="the steps table with cot, cot_text, cot_source filled; the "
                                      "summary goes next to it as NAME.cot-summary.json"),
        writer: str = typer.Option("template", "--writer", help="template (offline) or anthropic"),
        seed: int = typer.Option(0, "--seed", help="wording seed of the template writer"),
        model: Optional[str] = typer.Option(None, "--model", help="LLM model (anthropic writer)"),
        max_retries: Optional[int] = typer.Option(
            None, "--max-retries", help="validation failures fed back to the LLM before the step "
                                        "falls back to the template writer"),
        batch: bool = typer.Option(False, "--batch", help="first attempts through the Message "
                                                          "Batches API (anthropic writer)"),
        config: Optional[Path] = typer.Option(None, "--config", help="a JSON/YAML CoT config"),
        cache_dir: Optional[Path] = typer.Option(None, "--cache-dir",
                                                 help="LLM response cache (default out/cot-cache)"),
        params: Optional[Path] = typer.Option(
            None, "--params", help="params.yaml: writer, seed, max retries and cache dir from its "
                                   "'cot' section, the verified steps written per trajectory as "
                                   "the Prefect flow does (what dvc.yaml passes)"),
        hardware: str = typer.Option("host", "--hardware",
                                     help="the CPU the reasoning describes (caches, vector width, "
                                          "cores): host (this machine's fingerprint, where the "
                                          "steps were timed) or generic (the cost model's core)")):
    """Write each step's reasoning (the CoT column), validated against the step's facts.

    A step whose LLM answer still fails validation after the retries falls back to the template
    writer (cot_source=template-fallback); the run continues. The API key is read from
    ANTHROPIC_API_KEY only. Exit code 0 when every step has a CoT, 1 otherwise, 2 on bad input.
    """
    from .cot.config import CotConfig
    from .cot.run import write_cot
    from .cot.template import TemplateWriter
    from .records import StepRecord, read_records, table, write_table, write_text_atomic

    if params is not None:
        _cot_from_params(steps, out, _load_params(params).cot, hardware)
        return
    if writer not in ("template", "anthropic"):
        raise typer.BadParameter(f"--writer must be template or anthropic, got {writer!r}")
    if hardware not in ("host", "generic"):
        raise typer.BadParameter(f"--hardware must be host or generic, got {hardware!r}")
    from .cot.facts import GENERIC, Hardware

    hw = Hardware.current() if hardware == "host" else GENERIC
    cfg = CotConfig.load(config, seed=seed, max_retries=max_retries, model=model,
                         cache_dir=str(cache_dir) if cache_dir else None, batch=batch or None)
    try:
        recs = read_records(steps, StepRecord)
    except Exception as e:  # noqa: BLE001 - polars/pydantic errors: say which file
        _err(f"{steps}: not a steps table: {e}")
        raise typer.Exit(2) from None
    if writer == "anthropic":
        from .cot.anthropic_writer import AnthropicWriter, CotWriterError

        try:
            w = AnthropicWriter(cfg.anthropic, cache_dir=cfg.cache_dir)
        except CotWriterError as e:
            _err(str(e))
            raise typer.Exit(2) from None
    else:
        w = TemplateWriter(seed=cfg.seed, hardware=hw)
    done, summary = write_cot(recs, w, max_retries=cfg.max_retries, seed=cfg.seed, batch=cfg.batch,
                              concurrency=getattr(getattr(w, "config", None), "concurrency", 1),
                              hardware=hw)
    write_table(table(done, StepRecord), out)
    summary_path = out.with_name(out.stem + ".cot-summary.json")
    write_text_atomic(summary_path, json.dumps(summary, indent=2) + "\n")
    t = Table(title=f"steptp cot: {len(done)} steps -> {out}")
    for col in ("writer", "steps", "ok", "retries", "fallbacks", "failed", "tokens in/out", "cost $"):
        t.add_column(col, justify="left" if col == "writer" else "right")
    t.add_row(summary["writer"], str(summary["steps"]), str(summary["ok"]), str(summary["retries"]),
              str(summary["fallbacks"]), str(summary["failed"]),
              f"{summary.get('input_tokens', 0)}/{summary.get('output_tokens', 0)}",
              f"{summary.get('cost_usd', 0.0):.4f}")
    _listing_console().print(t)
    for e in summary["errors"][:20]:
        _err(e)
    console.print(f"wrote {out} and {summary_path}", highlight=False)
    raise typer.Exit(0 if summary["failed"] == 0 else 1)


def _cot_from_params(steps: Path, out: Path, c, hardware: str) -> None:
    from .pipeline import by_trajectory, cot_one
    from .records import StepRecord, read_records, table, write_table, write_text_atomic

    try:
        recs = read_records(steps, StepRecord)
    except Exception as e:  # noqa: BLE001 - polars/pydantic errors: say which file
        _err(f"{steps}: not a steps table: {e}")
        raise typer.Exit(2) from None
    done: list = []
    total: dict = {"writer": c.writer, "errors": []}
    try:
        for _tid, group in by_trajectory(recs):
            d, summary = cot_one(group, c, hardware)
            done += d
            for k, v in summary.items():
                if isinstance(v, (int, float)) and not isinstance(v, bool):
                    total[k] = total.get(k, 0) + v
                elif k == "errors":
                    total["errors"] += list(v)
    except Exception as e:  # noqa: BLE001 - e.g. no ANTHROPIC_API_KEY: say so, write nothing
        _err(f"cot: {type(e).__name__}: {e}")
        raise typer.Exit(2) from None
    write_table(table(done, StepRecord), out)
    summary_path = out.with_name(out.stem + ".cot-summary.json")
    write_text_atomic(summary_path, json.dumps(total, indent=2) + "\n")
    for e in total["errors"][:20]:
        _err(e)
    console.print(f"cot ({c.writer}): {sum(1 for s in done if s.cot)} of {len(done)} steps "
                  f"explained; wrote {out} and {summary_path}", highlight=False)
    raise typer.Exit(0 if not total.get("failed") else 1)


@app.command()
def measure(files: list[Path] = typer.Argument(..., help="LEIR (or TVMScript) files to time"),
            target: str = typer.Option("cpu", help="cpu or cuda"),
            threads: Optional[int] = typer.Option(None, help="TVM threads (default: the cores)"),
            min_repeat_ms: float = typer.Option(50.0, help="a repeat lasts at least this long"),
            timeout: float = typer.Option(60.0, help="seconds per kernel (build + timing)"),
            cache: Optional[Path] = typer.Option(None, help="result cache (default: "
                                                 "$STEPTP_CACHE or .steptp/cache.sqlite)"),
            no_cache: bool = typer.Option(False, "--no-cache", help="measure again")):
    """Time kernels in isolated workers (cached); print one JSON line per file and the
    fingerprint."""
    from .measure.runner.local import Measurer
    from .measure.timing import MeasureConfig

    cfg = MeasureConfig(min_repeat_ms=min_repeat_ms, num_threads=threads, timeout_s=timeout)
    texts = [_read(f) for f in files]
    with Measurer(_target(target), cfg, cache=False if no_cache else (cache or True)) as m:
        typer.echo(json.dumps({"fingerprint": m.fingerprint.to_dict()}))
        outs = m.time_many(texts)
    for f, o in zip(files, outs):
        typer.echo(json.dumps({"file": str(f), **o.model_dump()}))
    raise typer.Exit(0 if all(o.ok for o in outs) else 1)


# ---------------------------------------------------------------------------- release pipeline
def _load_params(path: Optional[Path]):
    """The settings of params.yaml, or the defaults when no file is given
    (``steptp.params.load``); a bad file ends the command (exit 2) with every bad key named."""
    from .params import ParamsError, load

    try:
        return load(path)
    except ParamsError as e:
        _err(str(e))
        raise typer.Exit(2) from None


@app.command()
def curate(kernels: Path = typer.Option(..., "--kernels", help="kernels.parquet (steptp extract)"),
           steps: Path = typer.Option(..., "--steps", help="steps.parquet (steptp search / cot)"),
           trajectories: Optional[Path] = typer.Option(None, "--trajectories", help="trajectories.parquet"),
           out: Path = typer.Option(Path("curated"), "--out", "-o", help="output folder"),
           params: Optional[Path] = typer.Option(None, "--params", help="params.yaml (section 'curate', 'seed')")):
    """Dedup, drop no-ops / shortcuts / noisy steps (each with its reason in rejects.parquet),
    balance strategies and split by workload. Writes OUT/{kernels,steps,trajectories,rejects}.parquet,
    splits.json and report.json."""
    from . import params as P
    from .curate import curate as do_curate, write_curated
    from .records import KernelRecord, TrajectoryRecord, read_records

    s = _load_params(params)
    hardware = ""
    if params is not None:
        from .export import hardware_description

        hardware = hardware_description(P.fingerprint(s))  # as the flow does
    from .curate.reasoning import read_steps

    ks = read_records(kernels, KernelRecord)
    # the rows without their reasoning (most of a record's memory), each with what curation
    # reads of it; the reasoning is joined back when the tables are written
    ss, notes, texts = read_steps(steps, hardware, s.curate.max_tokens)
    ts = read_records(trajectories, TrajectoryRecord) if trajectories else []
    from .search import stage_stats

    res = do_curate(ks, ss, ts, s.curate, hardware=hardware, rule=s.significance,
                    search_stats=stage_stats.read(trajectories.parent) if trajectories else None,
                    notes=notes)
    write_curated(res, out, ks, ts, texts=texts)
    r = res.report
    console.print(f"kept {r['kept_steps']} of {r['input_steps']} steps -> {escape(str(out))}; rejects: "
                  f"{escape(json.dumps(r['rejects_by_reason']))}; splits: "
                  f"{escape(json.dumps({k: v['steps'] for k, v in r['splits'].items()}))}; strategy entropy "
                  f"{r['entropy_before_bits']:.3f} -> {r['entropy_after_bits']:.3f} bits")


@app.command()
def export(curated: Path = typer.Argument(..., help="a folder written by steptp curate"),
           out: Path = typer.Option(Path("release"), "--out", "-o", help="the release folder (replaced)"),
           params: Optional[Path] = typer.Option(None, "--params", help="params.yaml (name, version)"),
           decontamination: Optional[Path] = typer.Option(
               None, "--decontamination", help="the search stage's decontamination.json: the "
                                               "card says which benchmark kernels were kept out")):
    """Write a release folder: parquet tables, chat JSONL per split, plots and the dataset card.
    The manifest and Data Docs are added by `steptp validate --publish`."""
    from . import params as P
    from .export import export_release

    p = _load_params(params)
    decon = None
    if decontamination is not None:
        try:
            decon = json.loads(decontamination.read_text())
        except (OSError, ValueError) as e:
            _err(f"{decontamination}: not a decontamination report: {e}")
            raise typer.Exit(2) from None
        if decon is not None and not (isinstance(decon, dict) and isinstance(decon.get("folders"), list)):
            _err(f"{decontamination}: not a decontamination report (no folders list)")
            raise typer.Exit(2)
    if decon is None and p.decontaminate.folders:
        _err("params decontaminate.folders lists benchmark folders: give the search stage's "
             "--decontamination report, or the card cannot say what was kept out")
        raise typer.Exit(2)
    stats = export_release(curated, out, name=p.name, version=p.version,
                           params=p.source, fingerprint=P.fingerprint(p), decontamination=decon)
    console.print(f"{escape(str(out))}: {stats['counts']['steps']} examples "
                  f"{escape(json.dumps(stats['counts']['examples_per_split']))}")


@app.command()
def validate(release: Path = typer.Argument(..., help="a release folder (steptp export)"),
             params: Optional[Path] = typer.Option(None, "--params", help="params.yaml (thresholds)"),
             docs: Optional[Path] = typer.Option(None, "--docs", help="Data Docs folder "
                                                                     "(default RELEASE/data_docs)"),
             publish: Optional[Path] = typer.Option(None, "--publish", help="when every gate passes, "
                                                    "copy the release here with its manifest.json")):
    """Run the Great Expectations suites in expectations/ on a release and write Data Docs.
    Exit code 0 when every gate passes, 1 when one fails (nothing is published)."""
    from .export import publish as do_publish
    from .quality import validate_release

    import shutil

    if not (release / "data" / "steps.parquet").exists():
        raise typer.BadParameter(f"{release} is not a release folder (no data/steps.parquet)")
    p = _load_params(params)
    target = release
    if publish is not None:
        # validate a copy next to the destination (so RELEASE, e.g. a DVC output, stays as it is),
        # then move it into place only when every gate passes
        target = publish.parent / f".{publish.name}.validating"
        if target.exists():
            shutil.rmtree(target)
        publish.parent.mkdir(parents=True, exist_ok=True)
        shutil.copytree(release, target)
    rep = validate_release(target, p, docs_dir=docs)
    for name, s in rep.suites.items():
        mark = "[green]pass[/green]" if s["success"] else "[red]FAIL[/red]"
        console.print(f"{mark} {name}: {s['evaluated'] - s['failed']}/{s['evaluated']} expectations")
    for f in rep.failures:
        _err(f"  {f['suite']}: {f['expectation']} {f.get('column') or ''}: {f['why']}; "
             f"unexpected {f['unexpected']} {f.get('exception') or ''}")
    if not rep.success:
        if publish is not None:
            shutil.rmtree(target, ignore_errors=True)
        else:
            console.print(f"Data Docs: {escape(rep.docs)}")
        _err("quality gates failed: nothing published")
        raise typer.Exit(1)
    if publish is None:
        console.print(f"Data Docs: {escape(rep.docs)}")
    else:
        dest = do_publish(target, publish, params=p.source, validation=rep.to_dict(), move=True)
        console.print(f"published {escape(str(dest))}")
        console.print(f"Data Docs: {escape(str(dest / 'data_docs' / 'index.html'))}")


@app.command()
def release(params: Optional[Path] = typer.Option(None, "--params",
                                                help="params.yaml (default: ./params.yaml)"),
            out: Path = typer.Option(Path("releases"), "--out", "-o", help="releases folder"),
            nightly: bool = typer.Option(False, "--nightly",
                                         help="a nightly build: version <version>+nightly.<UTC date> "
                                              "(params nightly.version), measurements older than "
                                              "cache.max_age_hours re-measured"),
            date: Optional[str] = typer.Option(None, "--date", help="with --nightly: build as of this "
                                               "UTC date (YYYYMMDD; a backfill)"),
            force: bool = typer.Option(False, "--force", help="replace a published release of the "
                                       "same id whose records differ"),
            no_version: bool = typer.Option(False, "--no-version-control",
                                            help="skip dvc add/push and the git tag"),
            git: Optional[bool] = typer.Option(None, "--git/--no-git",
                                               help="commit and tag the release's .dvc file in git "
                                                    "and dvc push it (default: params publish.git, "
                                                    "off: the commands are printed instead)")):
    """The main job: build a quality-gated release end to end with the Prefect build_release
    flow (extract, search, CoT, curate, export, validate, compare with the previous release,
    publish), cached under OUT/.prefect-results, and print where the release and its Data Docs
    are.

    A published release is never overwritten: the same records again leave it untouched (exit
    0); other records under the same id are refused (exit 1) unless --force. OUT/latest.json
    names the newest release. In a DVC project the release is dvc-added; only with --git (or
    params publish.git: true, as in the nightly deployment) is its .dvc file committed and
    tagged release-<id> (when the tree is clean) and pushed; otherwise the git and dvc push
    commands are printed for you to run. Progress is also appended to OUT/logs/<id>.log."""
    import os
    import time as _time

    from .export import ReleaseExists
    from .params import ParamsError, build, publish_git
    from .release import ReleaseGateFailed

    if params is None:
        params = Path("params.yaml")
        if not params.is_file():
            # no silent fallback to built-in defaults: they search every kernel of the zoo
            raise typer.BadParameter(
                f"no params.yaml in {Path.cwd()}: run in a project folder that has one, or pass "
                f"--params FILE (the steptp repository's params.yaml builds a small release)",
                param_hint="--params")
    p = _load_params(params)
    try:
        build(p, nightly, date)
        publish_git(p, git)
    except ParamsError as e:
        raise typer.BadParameter(str(e)) from None
    out = out.resolve()
    os.environ.setdefault("PREFECT_LOCAL_STORAGE_PATH", str(out / ".prefect-results"))
    os.environ.setdefault("PREFECT_RESULTS_PERSIST_BY_DEFAULT", "true")
    # the temporary local server can be slow to start on a busy 2-core machine
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "180")
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    t0 = _time.perf_counter()
    from steptp.flows.build_release import build_release

    try:
        res = build_release(p, str(out), nightly=nightly, date=date, force=force,
                            version_control=not no_version, git=git)
    except (ReleaseGateFailed, ReleaseExists) as e:
        _err(f"{e}" + (f"\nlog: {e.log}" if getattr(e, "log", None) else ""))
        raise typer.Exit(1) from None
    c = res["counts"]
    what = {"published": "release built", "replaced": "release rebuilt and replaced (--force)",
            "unchanged": "release already published with the same records, left untouched;"}[res["status"]]
    console.print(f"{what} in {_time.perf_counter() - t0:.0f} s: {c['kernels']} kernels, "
                  f"{c['trajectories']} trajectories, {c['steps']} examples "
                  f"{escape(json.dumps(c['examples_per_split']))}", soft_wrap=True)
    # soft_wrap: piped or redirected, a path stays on one line (rich would fold it at 80 columns)
    console.print(f"release:   {escape(res['release'])}", soft_wrap=True)
    console.print(f"card:      {escape(res['card'])}", soft_wrap=True)
    console.print(f"Data Docs: {escape(res['data_docs'])}", soft_wrap=True)
    console.print(f"log:       {escape(res['log'])}", soft_wrap=True)
    if res.get("previous") and res["status"] != "unchanged":
        console.print(f"changes since {escape(res['previous'])}: {escape(str(Path(res['release']) / 'diff.json'))}"
                      f" ({len(res['regressions'])} regressions beyond the spread)", soft_wrap=True)
    left = (res.get("versioning") or {}).get("commands")
    if left:
        console.print("git and the DVC remote left alone (publish.git off); to record this release "
                      "in git and push its data, run:", soft_wrap=True)
        for c in left:
            console.print(f"    {escape(c)}", soft_wrap=True, highlight=False)


@app.command()
def releases(out: Path = typer.Option(Path("releases"), "--out", "-o", help="releases folder"),
             no_status: bool = typer.Option(False, "--no-status", help="skip the DVC status (faster)"),
             as_json: bool = typer.Option(False, "--json", help="one JSON object per release")):
    """List the published releases: id, version, date, counts, DVC status (untracked, tracked,
    pushed, changed) and git tag; the one latest.json names is marked *."""
    from .release.versioning import list_releases

    rows = list_releases(out, with_status=not no_status)
    latest = ""
    if (out / "latest.json").is_file():
        latest = json.loads((out / "latest.json").read_text()).get("id", "")
    if as_json:
        for r in rows:
            print(json.dumps({**r, "latest": r["id"] == latest}, sort_keys=True))
        return
    if not rows:
        console.print(f"no published release in {escape(str(out))}")
        return
    # plain lines, not a table: ids are long and the lines stay greppable
    width = max(len(r["id"]) for r in rows)
    for r in rows:
        c = r["counts"] or {}
        typer.echo(f"{'*' if r['id'] == latest else ' '} {r['id']:<{width}}  {r['created'].replace('T', ' ')}  "
                   f"{c.get('kernels', '?'):>4} kernels {c.get('steps', '?'):>6} steps  "
                   f"dvc: {r['dvc'] or '-':<9}  tag: {r['tag'] or '-'}")
    typer.echo(f"{len(rows)} releases in {out}" + (f"; * = latest ({latest})" if latest else ""))


@app.command()
def pull(release_id: str = typer.Argument(..., help="a release id, e.g. steptp-tiny-0.1.0"),
         out: Path = typer.Option(Path("releases"), "--out", "-o", help="releases folder")):
    """Restore a published release from the DVC remote (on a fresh clone too: its .dvc file
    comes from the git tag release-ID when the working tree lacks it), then check every file
    against its manifest."""
    from .release.versioning import RestoreError, pull as do_pull

    try:
        dest = do_pull(release_id, out)
    except RestoreError as e:
        _err(str(e))
        raise typer.Exit(1) from None
    console.print(f"restored {escape(str(dest))} (checksums match the manifest)")


@app.command()
def search(kernels: Optional[Path] = typer.Option(None, "--kernels",
                                                  help="a kernels table (kernels.parquet)"),
           program: Optional[Path] = typer.Option(None, "--program", help="one LEIR file"),
           policy: str = typer.Option("beam", help="beam, mcts, greedy or random"),
           budget: int = typer.Option(64, "--budget", min=1, help="measurements per kernel"),
           seconds: float = typer.Option(120.0, "--seconds", help="wall seconds per kernel"),
           seed: int = typer.Option(0, "--seed"),
           evaluator: str = typer.Option("auto", help="auto (the Measurer service), measurer or "
                                                      "inprocess"),
           out: Path = typer.Option(Path("search"), "--out", "-o",
                                    help="folder for steps.parquet, trajectories.parquet and "
                                         "curves.json"),
           params: Optional[Path] = typer.Option(
               None, "--params", help="params.yaml: policy, budget, seconds, seed, threads, "
                                      "max_actions and max_kernels (the heaviest kernels) from "
                                      "its 'search' section, measurements older than "
                                      "cache.max_age_hours re-measured; the same search the "
                                      "Prefect flow runs (what dvc.yaml passes; needs --kernels)")):
    """Search rewrite sequences per kernel: verify and time every chosen candidate, write the
    steps table (every evaluated candidate, with its outcome) and the trajectories table (the
    best path per kernel)."""
    if params is not None:
        if kernels is None or program is not None:
            raise typer.BadParameter("--params goes with --kernels")
        _search_from_params(kernels, out, params)
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from .search import Budget
    from .search.batch import geomean, load_kernels, search_many
    from .search.evaluator import default_evaluator
    from .search.policies import POLICIES
    from .search.run import kernel_id_of

    if policy not in POLICIES:
        raise typer.BadParameter(f"unknown policy {policy!r}; use one of {', '.join(POLICIES)}")
    if (kernels is None) == (program is None):
        raise typer.BadParameter("give exactly one of --kernels and --program")
    if program is not None:
        from .leir import format_program

        prog = _load_program(program)
        items = [(kernel_id_of(prog), format_program(prog))]
    else:
        items = load_kernels(kernels)
    ev = default_evaluator(kind=evaluator)
    console.print(f"search: {len(items)} kernels, policy {policy}, {budget} measurements and "
                  f"{seconds:g} s per kernel, TVM_NUM_THREADS={ev.num_threads}, "
                  f"evaluator {type(ev).__name__}")
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=console) as bar:
        total = bar.add_task("kernels", total=len(items))
        inner = bar.add_task("measurements", total=budget)

        def on_progress(s):
            bar.update(inner, completed=s.measurements,
                       description=f"{s.kernel_id[:12]} best {s.root.seconds / s.best.seconds:.2f}x")

        def on_kernel(kid, res):
            bar.advance(total)
            bar.update(inner, completed=0)

        try:
            results = search_many(items, policy, Budget(budget, seconds), seed, out, ev,
                                  on_kernel=on_kernel, on_progress=on_progress)
        finally:
            ev.close()
    speedups = [r.trajectory.speedup for r in results.values() if r.trajectory is not None]
    for kid, r in results.items():
        if r.error:
            _err(f"{kid}: {r.error}")
    console.print(f"{len(speedups)}/{len(items)} kernels searched; geometric-mean speedup "
                  f"{geomean(speedups):.2f}x; wrote {escape(str(out))}/steps.parquet, "
                  f"trajectories.parquet, curves.json")
    raise typer.Exit(0 if len(speedups) == len(items) else 1)


def _search_from_params(kernels: Path, out: Path, params: Path) -> None:
    from .params import ParamsError
    from .pipeline import choose_kernels, contamination_index, search_one
    from .records import KernelRecord, StepRecord, TrajectoryRecord, read_records, table, write_table

    p = _load_params(params)
    a = p.search
    try:
        recs = read_records(kernels, KernelRecord)
    except Exception as e:  # noqa: BLE001 - polars/pydantic errors: say which file
        _err(f"{kernels}: not a kernels table: {e}")
        raise typer.Exit(2) from None

    def say(msg: str) -> None:
        console.print(escape(msg), highlight=False)

    try:
        index = contamination_index(p.decontaminate, p.extract.jobs)
    except ParamsError as e:
        _err(f"{params}: {e}")
        raise typer.Exit(2) from None
    chosen, every = choose_kernels(recs, a, p.extract, log=say, contamination=index)
    write_table(table(every, KernelRecord), out / "kernels-selected.parquet")
    # the kernels kept out of the pool, for the card (steptp export --decontamination)
    out.mkdir(parents=True, exist_ok=True)
    (out / "decontamination.json").write_text(
        json.dumps(None if index is None else index.report(), indent=1) + "\n")
    console.print(f"search: {len(chosen)} of {len(every)} kernels (max_kernels "
                  f"{a.max_kernels}), policy {a.policy}, {a.measurements} measurements and "
                  f"{a.seconds:g} s per kernel, threads {a.threads}")
    import time

    from .measure.worker import reuse_workers
    from .search import stage_stats

    steps, trajs = [], []
    t0 = time.monotonic()
    with reuse_workers():  # the kernels' searches start their measurement workers once
        for n, k in enumerate(chosen, 1):
            st, tr = search_one(k, a, p.significance, p.devices, max_age_s=p.cache.max_age_s,
                                log=say)
            steps += st
            trajs += tr
            # written after each kernel: an interrupted run keeps what it finished
            write_table(table(steps, StepRecord), out / "steps.parquet")
            write_table(table(trajs, TrajectoryRecord), out / "trajectories.parquet")
            console.print(f"[{n}/{len(chosen)}] {escape(k.name)}: {len(st)} steps"
                          + (f", best {tr[0].speedup:.2f}x" if tr else ", baseline failed"))
    if not chosen:
        write_table(table([], StepRecord), out / "steps.parquet")
        write_table(table([], TrajectoryRecord), out / "trajectories.parquet")
    stage_stats.write(out, wall_s=time.monotonic() - t0, kernels=len(chosen), steps=len(steps), workers=1)
    console.print(f"{len(trajs)}/{len(chosen)} kernels searched; wrote {escape(str(out))}/steps.parquet, "
                  f"trajectories.parquet")
    raise typer.Exit(0 if len(trajs) == len(chosen) else 1)


@app.command()
def strategies(family: Optional[str] = typer.Option(None, help="only this family (loop, graph, "
                                                           "memory, algebraic, algorithmic)"),
               as_json: bool = typer.Option(False, "--json", help="one JSON object per strategy")):
    """List the strategy catalog: family, exactness class, targets and inverse of each."""
    from . import strategies as S

    rows = [r for r in S.describe() if family is None or r["family"] == family]
    if not rows:
        known = sorted({r["family"] for r in S.describe()})
        raise typer.BadParameter(f"no strategy of family {family!r}; families: {', '.join(known)}")
    if as_json:
        for r in rows:
            print(json.dumps(r, sort_keys=True))
        return
    table = Table(title=f"{len(rows)} strategies")
    for col in ("name", "family", "exactness", "targets", "inverse"):
        table.add_column(col)
    for r in rows:
        table.add_row(r["name"], r["family"], r["exactness"], ",".join(r["targets"]), r["inverse"] or "-")
    _listing_console().print(table)


@app.command()
def apply(program: Path = typer.Argument(..., help="a LEIR file"),
          strategy: str = typer.Option(..., "--strategy", "-s", help="a strategy name (steptp strategies)"),
          site: Optional[str] = typer.Option(None, help='only this site, as JSON, e.g. \'{"path":[0],"loops":["i"]}\''),
          params: Optional[str] = typer.Option(None, help='only these params, as JSON, e.g. \'{"factor":4}\''),
          seed: int = typer.Option(0, help="seed for sampled parameters"),
          max_per_site: Optional[int] = typer.Option(None, help="at most this many parameter choices per site"),
          target: str = typer.Option("cpu", help="cpu or gpu: which strategies' targets to honour"),
          do_verify: bool = typer.Option(False, "--verify", help="build and check every candidate against "
                                         "the original, in isolated workers (cached)"),
          show_rejected: bool = typer.Option(False, "--rejected", help="also list refused choices and why"),
          as_json: bool = typer.Option(False, "--json", help="one JSON object per candidate")):
    """Apply one strategy to a program and print every candidate with its site and params.

    With --site/--params the one application is checked and printed (or refused with the
    reason, exit code 1). --verify builds each candidate and the original with TVM on seeded
    inputs and compares within the strategy's exactness class.
    """
    from . import strategies as S
    from .leir import format_program

    prog = _load_program(program)
    try:
        strat = S.get(strategy)
    except KeyError as e:
        raise typer.BadParameter(str(e.args[0] if e.args else e)) from None
    if (site is None) != (params is None):
        raise typer.BadParameter("--site and --params go together")
    if site is not None:
        try:
            site_j, params_j = json.loads(site), json.loads(params)
        except json.JSONDecodeError as e:
            raise typer.BadParameter(f"--site/--params must be JSON: {e}") from None
        verdict = S.check(prog, strategy, site_j, params_j)
        if not verdict.ok:
            _err(f"{strategy} refused at {json.dumps(site_j)} with {json.dumps(params_j)}: {verdict.reason}")
            raise typer.Exit(1)
        cands = [c for c in S.candidates(prog, strategy, target=target, seed=None)
                 if c.site.to_json() == site_j and dict(c.params) == params_j]
        if not cands:
            _err(f"{strategy} at {json.dumps(site_j)} with {json.dumps(params_j)} changes nothing")
            raise typer.Exit(1)
        rejected = []
    else:
        cands, rejected = S.candidates(prog, strategy, target=target, seed=seed,
                                       max_per_site=max_per_site, with_rejected=True)
    outcomes = [None] * len(cands)
    if do_verify and cands:
        from .measure import Measurer
        from .tir.target import Target

        tgt = Target.host_cpu() if target == "cpu" else Target.cuda()
        with Measurer(target=tgt, jobs=2) as m:
            outcomes = m.verify_many([(prog, c.program, c.exactness) for c in cands])
    for n, (c, o) in enumerate(zip(cands, outcomes)):
        head = dict(c.to_json())
        if o is not None:
            head["verified"] = bool(o.passed)
            if not o.passed:
                head["reason"] = o.reason
        if as_json:
            print(json.dumps({**head, "program": format_program(c.program)}, sort_keys=True))
        else:
            print(f"# candidate {n}: {json.dumps(head, sort_keys=True)}")
            sys.stdout.write(format_program(c.program))
    if show_rejected:
        for r in rejected:
            print(("" if as_json else "# rejected: ") + json.dumps(r.to_json(), sort_keys=True))
    if not cands:
        _err(f"{strategy} has no candidate in {program}"
             + (f" ({len(rejected)} refused; --rejected shows why)" if rejected else ""))
        raise typer.Exit(1)
    if any(o is not None and not o.passed for o in outcomes):
        raise typer.Exit(1)


@app.command("eval")
def eval_(release: Optional[Path] = typer.Option(None, "--release", help="a release folder: its "
                                                 "split's kernels, SFT prompts and trajectories"),
          split: Optional[str] = typer.Option(None, help="release split (default test)"),
          kernels: Optional[Path] = typer.Option(None, "--kernels", help="any kernels table"),
          leir: list[Path] = typer.Option([], "--leir", help="user LEIR kernels (repeatable)"),
          policy: list[str] = typer.Option([], "--policy", help="openai, anthropic, replay, random, "
                                           "search; repeat or comma-separate to compare side by side"),
          model: Optional[str] = typer.Option(None, help="model name (openai / anthropic)"),
          base_url: Optional[str] = typer.Option(None, "--base-url", help="an OpenAI-compatible "
                                                 "server, e.g. http://localhost:8000/v1 (vLLM)"),
          mode: Optional[str] = typer.Option(None, help="single (each prompt once) or multi (from "
                                             "the unscheduled kernel, up to --steps)"),
          multi: Optional[str] = typer.Option(None, help="multi-step search: chain, beam or mcts "
                                              "(UCT over the policy's verified proposals); "
                                              "comma-separate to compare, e.g. chain,mcts"),
          samples: Optional[int] = typer.Option(None, min=1, help="proposals per state (best-of-n)"),
          steps: Optional[int] = typer.Option(None, min=1, help="multi: steps per kernel"),
          width: Optional[int] = typer.Option(None, min=1, help="beam width"),
          mcts_c: Optional[float] = typer.Option(None, "--mcts-c", min=0.0, help="mcts exploration "
                                                 "constant (rewards are log speedups)"),
          max_proposals: Optional[int] = typer.Option(None, help="budget: proposals per kernel "
                                                      "(mcts default: samples x steps)"),
          max_tokens: Optional[int] = typer.Option(None, help="budget: LLM tokens per kernel"),
          wall_s: Optional[float] = typer.Option(None, help="budget: wall seconds per kernel"),
          temperature: Optional[float] = typer.Option(None, help="LLM sampling temperature"),
          max_kernels: Optional[int] = typer.Option(None, help="only the first N kernels"),
          seed: Optional[int] = typer.Option(None, help="seed of the random/search policies"),
          out: Optional[Path] = typer.Option(None, "--out", "-o", help="reports go to OUT/<run>/ "
                                             "(default eval)"),
          run: Optional[str] = typer.Option(None, help="run name (default: policies and mode)"),
          params: Optional[Path] = typer.Option(None, "--params", help="params.yaml (its eval: section)"),
          no_cache: bool = typer.Option(False, "--no-cache", help="re-verify and re-time everything"),
          fresh: bool = typer.Option(False, "--fresh", help="discard OUT/<run>/'s partial file of an "
                                     "interrupted run instead of resuming it")):
    """Score policies in the closed loop: each proposes steps in the release's chat format, and
    the verifier and timer that built the data judge them (no_reply, unparsable, bad_signature,
    illegal, failed_verification, unfaithful, timeout, verified + speedup). Writes
    OUT/<run>/proposals.parquet, summary.json, report.md and plots/; each judged state is kept in
    OUT/<run>/proposals.partial.jsonl as it completes, and a rerun of an interrupted run resumes
    from it. Keys come from OPENAI_API_KEY / ANTHROPIC_API_KEY only.

    Examples: steptp eval --release releases/X --policy openai --model M --base-url URL;
    steptp eval --kernels kernels.parquet --policy anthropic --model claude-sonnet-4-6 --mode multi
    --steps 8; steptp eval --release releases/X --policy replay,random,search"""
    from .eval.command import run_command
    from .eval.inputs import EvalInputError
    from .eval.report import markdown_table
    from .llm.chat import LLMError

    cli = {"split": split, "mode": mode, "multi": multi, "samples": samples, "steps": steps,
           "width": width, "mcts_c": mcts_c, "max_proposals": max_proposals, "max_tokens": max_tokens,
           "wall_s": wall_s, "temperature": temperature, "max_kernels": max_kernels, "seed": seed,
           "out": str(out) if out else None, "policies": list(policy)}
    try:
        summary, folder = run_command(release=release, kernels=kernels, leir=leir,
                                      params=_load_params(params), cli=cli, model=model,
                                      base_url=base_url, run=run, cache=not no_cache,
                                      llm_cache_dir=None, resume=not fresh,
                                      on_progress=lambda m: console.print(escape(m)))
    except (EvalInputError, ValueError, LLMError) as e:
        _err(f"steptp eval: {e}")
        raise typer.Exit(2) from None
    typer.echo(markdown_table(summary))
    typer.echo(f"wrote {folder}/report.md, summary.json, proposals.parquet, plots/")


env_app = typer.Typer(no_args_is_help=True, rich_markup_mode=None,
                      help="An HTTP environment for multi-step RL (steptp.rl.env).")
app.add_typer(env_app, name="env")


@env_app.command("serve")
def env_serve(release: Optional[Path] = typer.Option(None, "--release", help="a release folder: "
                                                     "/reset also takes its kernel_id"),
              host: str = typer.Option("127.0.0.1", "--host", help="address to listen on (loopback by "
                                       "default: the environment builds and runs what clients send)"),
              port: int = typer.Option(8000, "--port", help="port (0: any free one, printed)"),
              max_steps: int = typer.Option(4, "--max-steps", min=1, help="replies per episode"),
              max_episodes: int = typer.Option(64, "--max-episodes", min=1,
                                               help="live episodes at most (the oldest finished go first)"),
              jobs: int = typer.Option(1, "--jobs", "-j", min=1, help="measurement worker processes"),
              memory_limit: Optional[int] = typer.Option(None, "--memory-limit-mb",
                                                         help="memory limit per worker (MB)"),
              step_timeout: Optional[float] = typer.Option(None, "--step-timeout",
                                                           help="seconds one verification may take"),
              cache: Path = typer.Option(Path("env-cache.sqlite"), "--cache",
                                         help="measurement cache (a repeated program is not rebuilt)")):
    """Serve episodes over HTTP; each reply is judged by the eval judge (built, verified against
    the original kernel, timed) and scored by steptp.rl.reward.score.

    \b
    POST /reset  {"kernel": "<LEIR>"} or {"kernel_id": "..."} (with --release)
                 -> {"episode", "kernel_id", "observation": [system, user messages], "done": false}
    POST /step   {"episode": "...", "reply": "<model text>"}
                 -> {"observation", "reward", "done", "outcome", "reason", "speedup",
                     "step_speedup", "step", "strategy"}
    GET  /health -> {"ok": true, "episodes", "max_episodes", "max_steps"}

    \b
    A verified step advances the episode's program; any other reply leaves it. "done" after
    --max-steps replies. Errors are JSON {"error", "status"}: 400 bad body, 404 unknown episode,
    409 finished episode, 413 body too large, 503 too many live episodes.

    \b
    Example:
      steptp env serve --port 8000 &
      curl -s 127.0.0.1:8000/reset -d '{"kernel": "kernel f32 k(A[8]) -> B[8]\\n for i in 8:\\n  B[i] = A[i] * 2.0\\n"}'
      curl -s 127.0.0.1:8000/step -d '{"episode": "<id>", "reply": "<think>...</think> {...}"}'

    docs/train.md ("Multi-step RL: the environment") has a Python client."""
    from .rl.env import Env, make_server, open_judge

    judge, m = open_judge(jobs=jobs, memory_limit_mb=memory_limit, cache=cache, step_timeout_s=step_timeout)
    try:
        try:
            env = Env(judge, release=release, max_steps=max_steps, max_episodes=max_episodes)
            srv = make_server(env, host, port)
        except (ValueError, OSError) as e:
            _err(f"steptp env serve: {e}")
            raise typer.Exit(2) from None
        import signal

        def _stop(*_):
            raise KeyboardInterrupt   # SIGTERM too closes the measurer's workers (the finally below)

        signal.signal(signal.SIGTERM, _stop)
        h, p = srv.server_address[:2]
        typer.echo(f"serving on http://{h}:{p} (POST /reset, POST /step, GET /health); Ctrl-C stops", err=True)
        try:
            srv.serve_forever()
        except KeyboardInterrupt:
            pass
        finally:
            srv.server_close()
    finally:
        judge.close()
        m.close()


def main() -> None:
    app()


if __name__ == "__main__":
    main()
