"""steptp's own ATen -> Relax converters, for operators TVM's exported-program importer lacks or
converts into kernels the raise cannot read (``from_exported_program``'s custom converter map).

Every converter takes ``(node, importer)`` (a ``torch.fx`` node of the decomposed exported graph
and TVM's ``ExportedProgramImporter``) and returns a Relax expression. They only emit Relax
operators whose legalization (``LegalizeOps``) gives plain loop nests:

* ``max.dim`` / ``min.dim`` and ``topk`` with ``k = 1``: TVM's own converters (and its only
  lowering of ``topk``) emit a sort kernel that writes its outputs through opaque calls, which
  the raise rejects (``no-output``). Here the values are a ``max``/``min`` reduction and the
  indices an ``argmax``/``argmin`` reduction over the same axis: two kernels that raise to LEIR
  and are checked like any other. Ties: both PyTorch (CPU) and TVM's ``argmax``/``argmin`` return
  the first index of the extreme value. ``topk`` with ``k > 1`` keeps TVM's converter.
* ``amax`` / ``amin`` (one axis, several, or all): ``max`` / ``min`` reductions.
* ``prod.dim_int``: a ``prod`` reduction.
* ``convolution`` with ``transposed=True`` on 5-D inputs (``conv_transpose3d``): Relax's
  ``conv3d_transpose`` (its legalization is the definition: the input dilated by the stride,
  padded by ``dilation * (k - 1) - padding`` (+ ``output_padding`` at the end) and convolved
  with the flipped kernel). The other convolutions keep TVM's converter.

``CONVERTERS`` maps the ATen operator names (as ``torch.export`` spells them after
``run_decompositions``) to these functions; ``steptp.zoo.relax_import`` gives them precedence over
TVM's.
"""

from __future__ import annotations

import math
from typing import Any, Callable

from tvm import relax

__all__ = ["CONVERTERS", "bind"]


def _arg(node, i: int, name: str, default: Any) -> Any:
    if len(node.args) > i:
        return node.args[i]
    return node.kwargs.get(name, default)


def _axes(dim: Any) -> list[int] | None:
    """An ATen ``dim`` argument (int, list, empty list = all) as a Relax axis list."""
    if dim is None:
        return None
    if isinstance(dim, int):
        return [dim]
    dims = [int(d) for d in dim]
    return dims or None


def _reduce_with_index(node, importer, x, dim: int, keepdim: bool, largest: bool):
    bb = importer.block_builder
    vals = bb.emit((relax.op.max if largest else relax.op.min)(x, [dim], keepdims=keepdim))
    idx = bb.emit((relax.op.argmax if largest else relax.op.argmin)(x, dim, keepdim))
    return bb.emit(relax.Tuple([vals, idx]))


def _max_min_dim(largest: bool) -> Callable:
    def convert(node, importer):
        x = importer.env[node.args[0]]
        dim = int(_arg(node, 1, "dim", 0))
        keepdim = bool(_arg(node, 2, "keepdim", False))
        return _reduce_with_index(node, importer, x, dim, keepdim, largest)

    return convert


def _topk(node, importer):
    x = importer.env[node.args[0]]
    k = int(_arg(node, 1, "k", 1))
    dim = int(_arg(node, 2, "dim", -1))
    largest = bool(_arg(node, 3, "largest", True))
    if k != 1:
        return importer.convert_map_tvm["topk.default"](node)
    return _reduce_with_index(node, importer, x, dim, True, largest)


def _amax_amin(largest: bool) -> Callable:
    def convert(node, importer):
        x = importer.env[node.args[0]]
        axes = _axes(_arg(node, 1, "dim", []))
        keepdim = bool(_arg(node, 2, "keepdim", False))
        op = relax.op.max if largest else relax.op.min
        return importer.block_builder.emit(op(x, axes, keepdims=keepdim))

    return convert


def _prod_dim(node, importer):
    x = importer.env[node.args[0]]
    dim = int(_arg(node, 1, "dim", 0))
    keepdim = bool(_arg(node, 2, "keepdim", False))
    dtype = _arg(node, 3, "dtype", None)
    if dtype is not None:
        x = importer.block_builder.emit(relax.op.astype(x, str(dtype).replace("torch.", "")))
    return importer.block_builder.emit(relax.op.prod(x, [dim], keepdims=keepdim))


def _triple(v: Any) -> list[int]:
    if isinstance(v, int):
        return [v] * 3
    v = [int(a) for a in v]
    return v * 3 if len(v) == 1 else v


def _convolution(node, importer):
    args = importer.retrieve_args(node)
    x = args[0]
    transposed = bool(args[6]) if len(args) > 6 else False
    if not transposed or len(importer.shape_of(x)) != 5:
        return importer.convert_map_tvm["convolution.default"](node)
    weight = args[1]
    bias = args[2] if len(args) > 2 else None
    stride = _triple(args[3] if len(args) > 3 else 1)
    padding = _triple(args[4] if len(args) > 4 else 0)
    dilation = _triple(args[5] if len(args) > 5 else 1)
    output_padding = _triple(args[7] if len(args) > 7 else 0)
    groups = int(args[8]) if len(args) > 8 else 1
    bb = importer.block_builder
    y = bb.emit(relax.op.nn.conv3d_transpose(
        x, weight, strides=stride, padding=padding, output_padding=output_padding,
        dilation=dilation, groups=groups, data_layout="NCDHW", kernel_layout="IODHW"))
    if bias is None or (isinstance(bias, relax.Call) and bias.op.name == "relax.null_value"):
        return y
    return bb.emit(relax.op.add(y, relax.op.reshape(bias, (1, -1, 1, 1, 1))))


def _fallback(importer, name: str, node):
    """TVM's own converter for ``name``; a NotImplementedError (reported as unsupported, the node
    becomes opaque) when it has none."""
    fn = importer.convert_map_tvm.get(name)
    if fn is None:
        raise NotImplementedError(f"{name}: this variant has no converter")
    return fn(node)


_SCATTER_REDUCE = {"sum": "add", "prod": "mul", "amax": "max", "amin": "min", "mean": "mean"}


def _scatter_add(node, importer):
    x, dim, index, src = importer.retrieve_args(node)[:4]
    return importer.block_builder.emit(
        relax.op.scatter_elements(x, index, src, axis=int(dim), reduction="add"))


def _scatter_reduce(node, importer):
    args = importer.retrieve_args(node)
    x, dim, index, src, reduce = args[:5]
    include_self = bool(args[5]) if len(args) > 5 else node.kwargs.get("include_self", True)
    if not include_self or reduce not in _SCATTER_REDUCE:
        raise NotImplementedError(f"scatter_reduce reduce={reduce!r} include_self="
                                  f"{include_self}: only include_self=True with "
                                  f"{sorted(_SCATTER_REDUCE)}")
    return importer.block_builder.emit(relax.op.scatter_elements(
        x, index, src, axis=int(dim), reduction=_SCATTER_REDUCE[reduce]))


def _index_put(node, importer):
    """``x.index_put(indices, values)`` with fewer index tensors than dimensions (``x[i] = v``):
    the remaining dimensions get full ``arange`` indices, so TVM's ``index_put`` (which needs
    one index per dimension) applies."""
    import numpy as np

    args = importer.retrieve_args(node)
    x, indices, values = args[0], list(args[1]), args[2]
    accumulate = bool(args[3]) if len(args) > 3 else bool(node.kwargs.get("accumulate", False))
    shape = [int(d) for d in importer.shape_of(x)]
    if any(i is None for i in indices) or len(indices) >= len(shape):
        return _fallback(importer, "index_put.default", node)
    bb = importer.block_builder
    ishape = np.broadcast_shapes(*[tuple(int(d) for d in importer.shape_of(i))
                                   for i in indices])
    rest = shape[len(indices):]
    full = list(ishape) + rest
    out = []
    for i in indices:
        r = bb.emit(relax.op.reshape(i, list(importer.shape_of(i)) + [1] * len(rest)))
        out.append(bb.emit(relax.op.broadcast_to(
            relax.op.astype(r, "int64"), full)))
    for k, n in enumerate(rest):
        ar = np.arange(n, dtype="int64").reshape([1] * (len(ishape) + k) + [n]
                                                 + [1] * (len(rest) - k - 1))
        out.append(bb.emit(relax.op.broadcast_to(relax.const(ar), full)))
    vals = bb.emit(relax.op.broadcast_to(values, full))
    return bb.emit(relax.op.index_put(x, relax.Tuple(out), vals, accumulate))


def _addmv(node, importer):
    args = importer.retrieve_args(node)
    c, a, v = args[:3]
    beta = node.kwargs.get("beta", 1)
    alpha = node.kwargs.get("alpha", 1)
    bb = importer.block_builder
    mv = bb.emit(relax.op.matmul(a, v))
    dtype = str(mv.ty.dtype) if hasattr(mv, "ty") else "float32"
    if alpha != 1:
        mv = bb.emit(relax.op.multiply(mv, relax.const(float(alpha), dtype)))
    if beta == 0:
        return mv
    if beta != 1:
        c = bb.emit(relax.op.multiply(c, relax.const(float(beta), dtype)))
    return bb.emit(relax.op.add(c, mv))


def _var_mean(node, importer):
    x = importer.env[node.args[0]]
    shape = [int(d) for d in importer.shape_of(x)]
    axes = _axes(_arg(node, 1, "dim", None))
    corr = node.kwargs.get("correction", 1)
    corr = 1 if corr is None else float(corr)
    keepdim = bool(node.kwargs.get("keepdim", False))
    n = 1
    for a in (axes if axes is not None else range(len(shape))):
        n *= shape[a]
    bb = importer.block_builder
    mean = bb.emit(relax.op.mean(x, axes, keepdims=keepdim))
    var = relax.op.variance(x, axes, keepdims=keepdim)
    if corr:
        var = relax.op.multiply(var, relax.const(n / max(n - corr, 1e-30), "float32"))
    return bb.emit(relax.Tuple([bb.emit(var), mean]))


def _unfold(node, importer):
    """``Tensor.unfold(dim, size, step)``: a gather with a constant window index
    (``idx[w, j] = w * step + j``) along ``dim``, the window axis moved last."""
    import numpy as np

    x = importer.env[node.args[0]]
    dim, size, step = (int(a) for a in node.args[1:4])
    shape = [int(d) for d in importer.shape_of(x)]
    dim %= len(shape)
    n = (shape[dim] - size) // step + 1
    idx = (np.arange(n)[:, None] * step + np.arange(size)[None, :]).astype("int64")
    bb = importer.block_builder
    g = bb.emit(relax.op.take(x, relax.const(idx), axis=dim))  # (.., n, size, ..)
    nd = len(shape) + 1
    perm = [a for a in range(nd) if a != dim + 1] + [dim + 1]
    return bb.emit(relax.op.permute_dims(g, perm))


def _pairwise(bb, x1, x2, p: float):
    d = bb.emit(relax.op.subtract(relax.op.expand_dims(x1, -2), relax.op.expand_dims(x2, -3)))
    if p == 2.0:
        return bb.emit(relax.op.sqrt(relax.op.sum(relax.op.multiply(d, d), [-1])))
    if p == 1.0:
        return bb.emit(relax.op.sum(relax.op.abs(d), [-1]))
    raise NotImplementedError(f"cdist/pdist with p={p}: only p=1 and p=2")


def _cdist(node, importer):
    args = importer.retrieve_args(node)
    return _pairwise(importer.block_builder, args[0], args[1], float(args[2]))


def _pdist(node, importer):
    """``F.pdist``: the pairwise distances of the rows, taken from the upper triangle (i < j) of
    the full distance matrix."""
    import numpy as np

    args = importer.retrieve_args(node)
    x, p = args[0], float(args[1]) if len(args) > 1 else 2.0
    n = int(importer.shape_of(x)[0])
    bb = importer.block_builder
    full = _pairwise(bb, x, x, p)
    iu = np.triu_indices(n, 1)
    flat = (iu[0] * n + iu[1]).astype("int64")
    return bb.emit(relax.op.take(bb.emit(relax.op.reshape(full, [n * n])), relax.const(flat),
                                 axis=0))


# -- sequential scans: TVM's scan lowering (DispatchSortScan) covers only cumsum/cumprod; these
# write the same kind of kernel (one sequential loop per row, like TVM's cumsum) as TVMScript.
_SCAN_TEMPLATE = """
@T.prim_func(private=True, s_tir=True)
def {name}(x: T.Buffer((T.int64({R}), T.int64({L})), "{dt}"), {outs}):
    T.func_attr({{"tirx.noalias": True}})
    with T.sblock("{name}_generic"):
        T.reads()
        T.writes()
        for r in range(T.int64({R})):
{init}
            for j in range(T.int64({L1})):
{step}
"""
_SCANS = {
    # values and the index of the last extreme so far (ties: the latest index, as PyTorch)
    "cummax": ("v[r, T.int64(0)] = x[r, T.int64(0)]\ni[r, T.int64(0)] = T.int64(0)",
               "i[r, j + T.int64(1)] = T.Select(x[r, j + T.int64(1)] >= v[r, j], j + T.int64(1), "
               "i[r, j])\nv[r, j + T.int64(1)] = T.max(v[r, j], x[r, j + T.int64(1)])"),
    "cummin": ("v[r, T.int64(0)] = x[r, T.int64(0)]\ni[r, T.int64(0)] = T.int64(0)",
               "i[r, j + T.int64(1)] = T.Select(x[r, j + T.int64(1)] <= v[r, j], j + T.int64(1), "
               "i[r, j])\nv[r, j + T.int64(1)] = T.min(v[r, j], x[r, j + T.int64(1)])"),
    # log(exp(a) + exp(b)) as max(a, b) + log(1 + exp(-|a - b|)): no overflow, no underflow
    "logcumsumexp": ("v[r, T.int64(0)] = x[r, T.int64(0)]",
                     "v[r, j + T.int64(1)] = T.max(v[r, j], x[r, j + T.int64(1)]) + T.log(T.float32(1) "
                     "+ T.exp(T.float32(0) - T.fabs(v[r, j] - x[r, j + T.int64(1)])))"),
}


def _scan(kind: str, with_index: bool):
    def convert(node, importer):
        import tvm

        x = importer.env[node.args[0]]
        dim = int(_arg(node, 1, "dim", 0))
        shape = [int(d) for d in importer.shape_of(x)]
        dt = str(x.ty.dtype)
        if kind == "logcumsumexp" and dt != "float32":
            raise NotImplementedError(f"logcumsumexp on {dt}: float32 only")
        nd = len(shape)
        dim %= max(nd, 1)
        bb = importer.block_builder
        perm = [a for a in range(nd) if a != dim] + [dim]
        xt = bb.emit(relax.op.permute_dims(x, perm)) if perm != list(range(nd)) else x
        L = shape[dim] if nd else 1
        R = max(1, int(math.prod(shape)) // max(L, 1))
        x2 = bb.emit(relax.op.reshape(xt, [R, L]))
        init, step = _SCANS[kind]
        outs = f'v: T.Buffer((T.int64({R}), T.int64({L})), "{dt}")'
        if with_index:
            outs += f', i: T.Buffer((T.int64({R}), T.int64({L})), "int64")'
        text = _SCAN_TEMPLATE.format(
            name=kind, R=R, L=L, L1=L - 1, dt=dt, outs=outs,
            init="\n".join(" " * 12 + ln for ln in init.splitlines()),
            step="\n".join(" " * 16 + ln for ln in step.splitlines()))
        if kind == "logcumsumexp":
            text = text.replace("T.float32", f"T.{dt}")
        f = tvm.script.from_source(text)
        if isinstance(f, tvm.IRModule):
            f = f[kind]
        gv = bb.add_func(f, kind)
        sinfo = [relax.TensorType([R, L], dt)] + ([relax.TensorType([R, L], "int64")]
                                                  if with_index else [])
        call = bb.emit(relax.call_tir(gv, [x2], sinfo if with_index else sinfo[0]))
        tshape = [shape[a] for a in perm]
        inv = [perm.index(a) for a in range(nd)]

        def back(t):
            t = bb.emit(relax.op.reshape(t, tshape))
            return bb.emit(relax.op.permute_dims(t, inv)) if perm != list(range(nd)) else t

        if not with_index:
            return back(call)
        return bb.emit(relax.Tuple([back(bb.emit(relax.TupleGetItem(call, 0))),
                                    back(bb.emit(relax.TupleGetItem(call, 1)))]))

    return convert


def _adaptive_max_pool2d(node, importer):
    """``adaptive_max_pool2d`` whose output size divides the input size: fixed windows
    ``(H/oh, W/ow)``. Values are a max and indices an argmax over each window, turned into
    PyTorch's flat ``h * W + w`` index into the input plane."""
    import numpy as np

    x = importer.env[node.args[0]]
    oh, ow = (int(v) for v in node.args[1])
    n, c, h, w = (int(d) for d in importer.shape_of(x))
    if h % oh or w % ow:
        raise NotImplementedError(f"adaptive_max_pool2d {h}x{w} -> {oh}x{ow}: only output "
                                  f"sizes that divide the input")
    kh, kw = h // oh, w // ow
    bb = importer.block_builder
    win = bb.emit(relax.op.reshape(relax.op.permute_dims(
        relax.op.reshape(x, [n, c, oh, kh, ow, kw]), [0, 1, 2, 4, 3, 5]), [n, c, oh, ow, kh * kw]))
    vals = bb.emit(relax.op.max(win, [-1]))
    local = bb.emit(relax.op.astype(relax.op.argmax(win, -1), "int64"))
    base = (np.arange(oh)[:, None] * kh * w + np.arange(ow)[None, :] * kw).astype("int64")
    idx = bb.emit(relax.op.add(
        relax.op.add(relax.op.multiply(relax.op.floor_divide(local, relax.const(kw, "int64")),
                                       relax.const(w, "int64")),
                     relax.op.floor_mod(local, relax.const(kw, "int64"))),
        relax.const(base, "int64")))
    return bb.emit(relax.Tuple([vals, idx]))


#: ATen operator name -> converter(node, importer)
CONVERTERS: dict[str, Callable] = {
    "max.dim": _max_min_dim(True),
    "min.dim": _max_min_dim(False),
    "topk.default": _topk,
    "amax.default": _amax_amin(True),
    "amin.default": _amax_amin(False),
    "prod.dim_int": _prod_dim,
    "convolution.default": _convolution,
    "scatter_add.default": _scatter_add,
    "scatter_reduce.two": _scatter_reduce,
    "index_put.default": _index_put,
    "addmv.default": _addmv,
    "var_mean.correction": _var_mean,
    "unfold.default": _unfold,
    "_cdist_forward.default": _cdist,
    "_pdist_forward.default": _pdist,
    "cummax.default": _scan("cummax", True),
    "cummin.default": _scan("cummin", True),
    "logcumsumexp.default": _scan("logcumsumexp", False),
    "adaptive_max_pool2d.default": _adaptive_max_pool2d,
}


def bind(name: str, importer) -> Callable | None:
    """Our converter for ``name`` as a one-argument function of the node (what TVM's importer
    calls), or None. TVM's own converters stay reachable as ``importer.convert_map_tvm``."""
    fn = CONVERTERS.get(name)
    if fn is None:
        return None
    if not hasattr(importer, "convert_map_tvm"):
        importer.convert_map_tvm = dict(importer.convert_map)
    return lambda node: fn(node, importer)
