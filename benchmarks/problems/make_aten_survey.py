"""Writes ``aten_survey/``: one small KernelBench-style problem file per ATen operator (or
operator variant) that common PyTorch model code and the operator-suite families reach, for the
extraction coverage survey (``python benchmarks/extraction.py --problems
benchmarks/problems/aten_survey``; the result is the table in ``docs/extraction-coverage.md``).

    python benchmarks/problems/make_aten_survey.py      # rewrites aten_survey/*.py
"""

from __future__ import annotations

from pathlib import Path

R = "torch.randn"
IDX = "torch.randint(0, 8, (4, 3))"
# name -> (docstring, forward args, return expression, get_inputs list)
SURVEY: dict[str, tuple[str, str, str, str]] = {
    # reductions with indices
    "max_dim": ("torch.max(x, dim)", "x", "torch.max(x, dim=1)", f"{R}(4, 8)"),
    "min_dim_keepdim": ("torch.min(x, dim, keepdim)", "x", "torch.min(x, 1, keepdim=True)", f"{R}(4, 8)"),
    "argmax_keepdim": ("argmax keepdim", "x", "torch.argmax(x, dim=-1, keepdim=True)", f"{R}(4, 8)"),
    "topk_k1": ("topk k=1", "x", "torch.topk(x, 1, dim=-1)", f"{R}(4, 8)"),
    "topk_k3": ("topk k=3 (needs a sort)", "x", "torch.topk(x, 3, dim=-1)", f"{R}(4, 8)"),
    "topk_k3_smallest": ("topk k=3 largest=False", "x", "torch.topk(x, 3, largest=False)[0]", f"{R}(4, 8)"),
    "sort": ("sort", "x", "torch.sort(x, dim=-1)[0]", f"{R}(4, 8)"),
    "argsort": ("argsort", "x", "torch.argsort(x, dim=-1)", f"{R}(4, 8)"),
    "kthvalue": ("kthvalue", "x", "torch.kthvalue(x, 2, dim=-1)[0]", f"{R}(4, 8)"),
    "median_dim": ("median over a dim", "x", "torch.median(x, dim=-1)[0]", f"{R}(4, 9)"),
    "amax": ("amax", "x", "torch.amax(x, dim=(0, 1))", f"{R}(4, 8, 3)"),
    "amin": ("amin", "x", "torch.amin(x, dim=-1)", f"{R}(4, 8)"),
    "prod_dim": ("prod over a dim", "x", "torch.prod(x, dim=1)", f"torch.rand(4, 8) + 0.5"),
    "all_dim": ("all over a dim", "x", "torch.all(x > -1.0, dim=1)", f"{R}(4, 8)"),
    "any_dim": ("any over a dim", "x", "torch.any(x > 1.0, dim=1)", f"{R}(4, 8)"),
    "var_mean": ("var_mean", "x", "torch.var_mean(x, dim=1)", f"{R}(4, 8)"),
    "logsumexp": ("logsumexp", "x", "torch.logsumexp(x, dim=-1)", f"{R}(4, 8)"),
    # scatter / gather / indexing
    "gather": ("gather", "x, i", "torch.gather(x, 1, i)", f"{R}(4, 8), {IDX}"),
    "scatter_src": ("scatter with a source", "x, i, s", "torch.scatter(x, 1, i, s)",
                    f"{R}(4, 8), {IDX}, {R}(4, 3)"),
    "scatter_value": ("scatter a value", "x, i", "torch.scatter(x, 1, i, 2.0)", f"{R}(4, 8), {IDX}"),
    "scatter_add": ("scatter_add", "x, i, s", "x.scatter_add(1, i, s)", f"{R}(4, 8), {IDX}, {R}(4, 3)"),
    "scatter_reduce_amax": ("scatter_reduce amax", "x, i, s",
                            "x.scatter_reduce(1, i, s, reduce='amax')", f"{R}(4, 8), {IDX}, {R}(4, 3)"),
    "index_select": ("index_select", "x, i", "torch.index_select(x, 0, i)",
                     f"{R}(8, 4), torch.randint(0, 8, (5,))"),
    "index_put": ("index_put (x[i] = v)", "x, i, v", "x.index_put((i,), v)",
                  f"{R}(8, 4), torch.randint(0, 8, (3,)), {R}(3, 4)"),
    "index_put_accumulate": ("index_put accumulate", "x, i, v", "x.index_put((i,), v, accumulate=True)",
                             f"{R}(8, 4), torch.randint(0, 8, (3,)), {R}(3, 4)"),
    "advanced_index": ("x[i, j]", "x, i, j", "x[i, j]",
                       f"{R}(8, 8), torch.randint(0, 8, (5,)), torch.randint(0, 8, (5,))"),
    "where": ("where", "x, y", "torch.where(x > 0, x, y)", f"{R}(4, 8), {R}(4, 8)"),
    "masked_fill": ("masked_fill", "x", "x.masked_fill(x < 0, 0.5)", f"{R}(4, 8)"),
    # scans
    "cumsum": ("cumsum", "x", "torch.cumsum(x, dim=1)", f"{R}(4, 8)"),
    "cumprod": ("cumprod", "x", "torch.cumprod(x, dim=1)", f"torch.rand(4, 8) + 0.5"),
    "cummax": ("cummax", "x", "torch.cummax(x, dim=1)", f"{R}(4, 8)"),
    "cummin": ("cummin values", "x", "torch.cummin(x, dim=1)[0]", f"{R}(4, 8)"),
    "logcumsumexp": ("logcumsumexp", "x", "torch.logcumsumexp(x, dim=1)", f"{R}(4, 8)"),
    # windows, shuffles, resampling, padding
    "tensor_unfold": ("Tensor.unfold (sliding windows)", "x", "x.unfold(1, 4, 2)", f"{R}(4, 10)"),
    "nn_unfold": ("F.unfold (im2col)", "x", "F.unfold(x, kernel_size=2)", f"{R}(1, 2, 5, 5)"),
    "nn_fold": ("F.fold (col2im)", "x", "F.fold(x, output_size=(4, 4), kernel_size=2)", f"{R}(1, 8, 9)"),
    "pixel_shuffle": ("pixel_shuffle", "x", "F.pixel_shuffle(x, 2)", f"{R}(1, 8, 3, 3)"),
    "pixel_unshuffle": ("pixel_unshuffle", "x", "F.pixel_unshuffle(x, 2)", f"{R}(1, 2, 4, 4)"),
    "interp_nearest": ("interpolate nearest", "x", "F.interpolate(x, scale_factor=2, mode='nearest')",
                       f"{R}(1, 2, 4, 4)"),
    "interp_bilinear": ("interpolate bilinear", "x",
                        "F.interpolate(x, size=(7, 7), mode='bilinear', align_corners=False)",
                        f"{R}(1, 2, 4, 4)"),
    "interp_bicubic": ("interpolate bicubic", "x", "F.interpolate(x, scale_factor=2, mode='bicubic')",
                       f"{R}(1, 2, 4, 4)"),
    "interp_trilinear": ("interpolate trilinear", "x",
                         "F.interpolate(x, scale_factor=2, mode='trilinear')", f"{R}(1, 2, 3, 3, 3)"),
    "pad_constant": ("pad constant", "x", "F.pad(x, (1, 2, 0, 1), value=0.5)", f"{R}(1, 2, 4, 4)"),
    "pad_reflect": ("pad reflect 2-D", "x", "F.pad(x, (1, 1, 2, 0), mode='reflect')", f"{R}(1, 2, 4, 4)"),
    "pad_reflect1d": ("pad reflect 1-D", "x", "F.pad(x, (2, 1), mode='reflect')", f"{R}(1, 2, 6)"),
    "pad_replicate": ("pad replicate 2-D", "x", "F.pad(x, (1, 1, 1, 2), mode='replicate')",
                      f"{R}(1, 2, 4, 4)"),
    "pad_replicate3d": ("pad replicate 3-D", "x", "F.pad(x, (1, 1, 1, 1, 1, 1), mode='replicate')",
                        f"{R}(1, 1, 3, 3, 3)"),
    "pad_circular": ("pad circular", "x", "F.pad(x, (1, 1, 1, 1), mode='circular')", f"{R}(1, 2, 4, 4)"),
    # matmul family with scalars
    "einsum_bmm": ("einsum bij,bjk->bik", "a, b", "torch.einsum('bij,bjk->bik', a, b)",
                   f"{R}(2, 3, 4), {R}(2, 4, 5)"),
    "einsum_outer": ("einsum i,j->ij", "a, b", "torch.einsum('i,j->ij', a, b)", f"{R}(5), {R}(6)"),
    "einsum_trace": ("einsum ii->", "a", "torch.einsum('ii->', a)", f"{R}(5, 5)"),
    "baddbmm": ("baddbmm alpha/beta", "c, a, b", "torch.baddbmm(c, a, b, beta=0.5, alpha=2.0)",
                f"{R}(2, 3, 5), {R}(2, 3, 4), {R}(2, 4, 5)"),
    "addmm": ("addmm alpha/beta", "c, a, b", "torch.addmm(c, a, b, beta=0.5, alpha=2.0)",
              f"{R}(3, 5), {R}(3, 4), {R}(4, 5)"),
    "addmv": ("addmv", "c, a, v", "torch.addmv(c, a, v, beta=0.5, alpha=2.0)", f"{R}(3), {R}(3, 4), {R}(4)"),
    "addcmul": ("addcmul", "x, a, b", "torch.addcmul(x, a, b, value=0.5)", f"{R}(4, 8), {R}(4, 8), {R}(4, 8)"),
    "addcdiv": ("addcdiv", "x, a, b", "torch.addcdiv(x, a, b, value=0.5)",
                f"{R}(4, 8), {R}(4, 8), torch.rand(4, 8) + 0.5"),
    "lerp": ("lerp", "a, b", "torch.lerp(a, b, 0.3)", f"{R}(4, 8), {R}(4, 8)"),
    # norms
    "norm_p2_dim": ("torch.norm p=2 over a dim", "x", "torch.norm(x, p=2, dim=1)", f"{R}(4, 8)"),
    "vector_norm_l1": ("linalg.vector_norm ord=1", "x", "torch.linalg.vector_norm(x, ord=1, dim=-1)", f"{R}(4, 8)"),
    "vector_norm_inf": ("linalg.vector_norm ord=inf", "x", "torch.linalg.vector_norm(x, ord=float('inf'), dim=-1)",
                        f"{R}(4, 8)"),
    "matrix_norm_fro": ("linalg.matrix_norm fro", "x", "torch.linalg.matrix_norm(x)", f"{R}(2, 4, 4)"),
    "normalize": ("F.normalize", "x", "F.normalize(x, dim=-1)", f"{R}(4, 8)"),
    "cosine_similarity": ("cosine_similarity", "a, b", "F.cosine_similarity(a, b, dim=-1)", f"{R}(4, 8), {R}(4, 8)"),
    "cdist": ("cdist", "a, b", "torch.cdist(a, b)", f"{R}(4, 3), {R}(5, 3)"),
    "pdist": ("pdist", "a", "F.pdist(a)", f"{R}(5, 3)"),
    # linear-algebra-ish shape ops
    "cross": ("cross product", "a, b", "torch.cross(a, b, dim=1)", f"{R}(4, 3), {R}(4, 3)"),
    "diag_1d": ("diag of a vector", "v", "torch.diag(v)", f"{R}(5)"),
    "diag_2d": ("diag of a matrix", "x", "torch.diag(x)", f"{R}(5, 5)"),
    "diagonal": ("diagonal", "x", "torch.diagonal(x, offset=1)", f"{R}(5, 5)"),
    "diag_embed": ("diag_embed", "x", "torch.diag_embed(x)", f"{R}(2, 4)"),
    "triu": ("triu", "x", "torch.triu(x, diagonal=1)", f"{R}(5, 5)"),
    "tril": ("tril", "x", "torch.tril(x)", f"{R}(5, 5)"),
    "flip": ("flip", "x", "torch.flip(x, [0, 1])", f"{R}(4, 8)"),
    "roll": ("roll", "x", "torch.roll(x, 2, dims=1)", f"{R}(4, 8)"),
    "repeat_interleave": ("repeat_interleave", "x", "torch.repeat_interleave(x, 2, dim=0)", f"{R}(4, 8)"),
    # activations and elementwise
    "mish": ("mish", "x", "F.mish(x)", f"{R}(4, 8)"),
    "glu": ("glu", "x", "F.glu(x, dim=-1)", f"{R}(4, 8)"),
    "softsign": ("softsign", "x", "F.softsign(x)", f"{R}(4, 8)"),
    "logsigmoid": ("logsigmoid", "x", "F.logsigmoid(x)", f"{R}(4, 8)"),
    "hardshrink": ("hardshrink", "x", "F.hardshrink(x, 0.5)", f"{R}(4, 8)"),
    "remainder": ("remainder", "a, b", "torch.remainder(a, b)", f"{R}(4, 8), torch.rand(4, 8) + 0.5"),
    "frac": ("frac", "x", "torch.frac(x)", f"{R}(4, 8)"),
    "clamp_tensor": ("clamp with tensor bounds", "x, lo, hi", "torch.clamp(x, lo, hi)",
                     f"{R}(4, 8), -torch.rand(4, 8), torch.rand(4, 8)"),
    "bucketize": ("bucketize", "x, b", "torch.bucketize(x, b)", f"{R}(4, 8), torch.linspace(-2, 2, 7)"),
    "searchsorted": ("searchsorted", "s, x", "torch.searchsorted(s, x)",
                     f"torch.linspace(-2, 2, 7), {R}(5)"),
    # pooling with indices
    "maxpool2d_indices": ("max_pool2d return_indices", "x", "F.max_pool2d(x, 2, return_indices=True)",
                          f"{R}(1, 2, 4, 4)"),
    "adaptive_maxpool2d": ("adaptive_max_pool2d", "x", "F.adaptive_max_pool2d(x, (2, 2))", f"{R}(1, 2, 6, 6)"),
    # losses
    "cross_entropy": ("cross_entropy", "x, t", "F.cross_entropy(x, t)", f"{R}(4, 5), torch.randint(0, 5, (4,))"),
    "mse_loss": ("mse_loss", "a, b", "F.mse_loss(a, b)", f"{R}(4, 8), {R}(4, 8)"),
    "smooth_l1_loss": ("smooth_l1_loss", "a, b", "F.smooth_l1_loss(a, b)", f"{R}(4, 8), {R}(4, 8)"),
    "huber_loss": ("huber_loss", "a, b", "F.huber_loss(a, b, delta=0.5)", f"{R}(4, 8), {R}(4, 8)"),
    "kl_div": ("kl_div", "a, b", "F.kl_div(F.log_softmax(a, -1), F.softmax(b, -1), reduction='batchmean')",
               f"{R}(4, 8), {R}(4, 8)"),
    "bce": ("binary_cross_entropy", "p, t", "F.binary_cross_entropy(torch.sigmoid(p), t)",
            f"{R}(4, 8), torch.rand(4, 8)"),
    "triplet_margin": ("triplet_margin_loss", "a, p, n", "F.triplet_margin_loss(a, p, n)",
                       f"{R}(4, 8), {R}(4, 8), {R}(4, 8)"),
    "hinge_embedding": ("hinge_embedding_loss", "x, y", "F.hinge_embedding_loss(x, y)",
                        f"{R}(4, 8), torch.randint(0, 2, (4, 8)).float() * 2 - 1"),
}

TEMPLATE = '''import torch
import torch.nn as nn
import torch.nn.functional as F  # noqa: F401


class Model(nn.Module):
    """{doc}"""

    def forward(self, {args}):
        return {expr}


def get_inputs():
    return [{inputs}]


def get_init_inputs():
    return []
'''

MUTATE = '''import torch
import torch.nn as nn


class Model(nn.Module):
    """A module that updates a registered buffer in forward (a running statistic)."""

    def __init__(self):
        super().__init__()
        self.register_buffer("count", torch.zeros(1))

    def forward(self, x):
        self.count += 1
        return x * self.count


def get_inputs():
    return [torch.randn(4, 8)]


def get_init_inputs():
    return []
'''


def main() -> None:
    out = Path(__file__).parent / "aten_survey"
    out.mkdir(exist_ok=True)
    for old in out.glob("*.py"):
        old.unlink()
    for name, (doc, args, expr, inputs) in SURVEY.items():
        (out / f"{name}.py").write_text(TEMPLATE.format(doc=doc, args=args, expr=expr,
                                                        inputs=inputs))
    (out / "buffer_mutation.py").write_text(MUTATE)
    print(f"wrote {len(SURVEY) + 1} problem files to {out}")


if __name__ == "__main__":
    main()
