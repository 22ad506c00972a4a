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


#: ATen operator name -> converter(node, importer)
CONVERTERS: dict[str, Callable] = {
    "max.dim": _max_min_dim(True),
    "min.dim": _max_min_dim(False),
    "topk.default": _topk,
    "amax.default": _amax_amin(True),
    "amin.default": _amax_amin(False),
    "prod.dim_int": _prod_dim,
    "convolution.default": _convolution,
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
