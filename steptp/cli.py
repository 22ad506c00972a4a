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


def _err(message: str) -> None:
    """An error for the user: plain text on stderr (no markup, no wrapping, so subscripts like
    [i] and quoted source lines come out exactly)."""
    typer.echo(message, err=True)


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError as e:
        raise typer.BadParameter(f"cannot read {path}: {e.strerror}") from None


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
    """Check names, shapes, dtypes, ranks, constant subscripts and writes; print every error."""
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
           seeds: str = typer.Option("0,1,2", help="comma-separated input seeds"),
           target: str = typer.Option("cpu", help="cpu or cuda"),
           as_json: bool = typer.Option(False, "--json", help="print the result as JSON")):
    """Build candidate and reference, run both on seeded inputs, compare within tolerance.

    Outputs are pre-filled with NaN, so an element the candidate never writes fails. Exit code
    0 when it passes, 1 when it does not, 2 on invalid input.
    """
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
    res = do_verify(cand, ref, exactness=exactness, target=_target(target), seeds=seed_list)
    if as_json:
        print(json.dumps(res.to_dict() if hasattr(res, "to_dict") else res.model_dump(), indent=2))
    else:
        status = "[green]PASS[/green]" if res.passed else "[red]FAIL[/red]"
        console.print(f"{status} {escape(str(candidate))} vs {escape(str(reference))} ({exactness}): "
                      f"max abs err {res.max_abs_err:.3g}, max rel err {res.max_rel_err:.3g}"
                      + ("" if res.passed else f"\n  {res.reason}"))
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
    console.print(table)
    failed = [r for r in rows if not r.ok]
    for r in failed:
        _err(f"{r.name}: {r.error}")
    console.print(f"{len(rows) - len(failed)}/{len(rows)} kernels parsed, checked, lowered, built "
                  f"and verified")
    raise typer.Exit(1 if failed else 0)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
