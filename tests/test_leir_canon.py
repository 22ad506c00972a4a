"""steptp.leir.canon: deterministic renaming, metadata, hashing."""

import json

from steptp.leir import canonical_hash, canonical_text, canonicalize, format_program, parse
from steptp.leir.canon import loop_name, restore_names, tensor_name

SRC = """kernel fused(X: f32[4,8], W: f32[8,2]) -> Out: f32[4,2], B: f32[4]
  acc: f32[4,2]
  T0: f32[4] local
  for ax0 in 4 parallel, ax1 in 2:
    for rk in 8:
      acc[ax0,ax1] += X[ax0,rk] * W[rk,ax1]
    Out[ax0,ax1] = acc[ax0,ax1]
  for b in 4:
    T0[b] = 0.0
    for c in 2:
      T0[b] = T0[b] + Out[b,c]
    B[b] = T0[b]
"""


def test_canonical_names():
    p = parse(SRC)
    c, meta = canonicalize(p)
    assert format_program(c) == """kernel f32 fused(A[4,8], B[8,2]) -> C[4,2], D[4]
 E[4,2]
 F[4] local
 for i in 4 parallel, j in 2:
  E[i,j] += A[i,k] * B[k,j]
  C[i,j] = E[i,j]
 for i in 4:
  F[i] = 0.0
  F[i] = F[i] + C[i,j]
  D[i] = F[i]
"""
    assert meta["kernel"] == "fused"
    assert meta["tensors"] == {"A": "X", "B": "W", "C": "Out", "D": "B", "E": "acc", "F": "T0"}
    assert meta["loops"] == [
        {"path": [0], "new": "i", "old": "ax0"},
        {"path": [0, 0], "new": "j", "old": "ax1"},
        {"path": [0, 0, 0], "new": "k", "old": "rk"},
        {"path": [1], "new": "i", "old": "b"},
        {"path": [1, 1], "new": "j", "old": "c"},
    ]
    json.dumps(meta)  # JSON-ready


def test_renaming_is_simultaneous():
    # names that collide with the new names mid-rename (B -> A while A -> B; j <-> i; T1 -> D while T0 -> E)
    p = parse("""kernel k(B: f32[4], A: f32[4]) -> C: f32[4]
  T1: f32[4]
  T0: f32[4]
  for j in 4:
    for i in 1:
      T1[j] = B[j] - A[j]
      T0[j] = T1[j] * 2.0
    C[j] = T0[j] + A[j]
""")
    c, _ = canonicalize(p)
    assert format_program(c) == """kernel f32 k(A[4], B[4]) -> C[4]
 D[4]
 E[4]
 for i in 4:
  for j in 1:
   D[i] = A[i] - B[i]
   E[i] = D[i] * 2.0
  C[i] = E[i] + B[i]
"""


def test_idempotent_and_restorable():
    p = parse(SRC)
    c, meta = canonicalize(p)
    c2, meta2 = canonicalize(c)
    assert c2 == c
    assert meta2["tensors"] == {k: k for k in meta2["tensors"]}
    assert restore_names(c, meta) == p


def test_scalars_stay_loads():
    p = parse("kernel k(x: f32[4]) -> s: f32\n  for q in 4:\n    s += x[q]\n")
    c, _ = canonicalize(p)
    assert format_program(c) == "kernel f32 k(A[4]) -> B\n B += A[i]\n"
    assert parse(format_program(c)) == c


def test_hash_ignores_names_but_not_structure():
    p = parse(SRC)
    renamed = parse(SRC.replace("fused", "other").replace("acc", "tmp").replace("ax0", "ii"))
    assert canonical_hash(p) == canonical_hash(renamed)
    assert len(canonical_hash(p)) == 64
    assert canonical_text(p) == format_program(canonicalize(p)[0])
    assert canonical_text(p) != canonical_text(renamed)  # the kernel name stays in the text
    changed = parse(SRC.replace("Out[ax0,ax1] = acc[ax0,ax1]", "Out[ax0,ax1] = acc[ax0,ax1] * 2.0"))
    assert canonical_hash(changed) != canonical_hash(p)


def test_name_sequences():
    assert [tensor_name(n) for n in (0, 1, 25, 26, 27, 51, 52, 701, 702)] == \
        ["A", "B", "Z", "AA", "AB", "AZ", "BA", "ZZ", "AAA"]
    assert len({tensor_name(n) for n in range(2000)}) == 2000
    assert [loop_name(d) for d in (0, 1, 2, 17, 18, 19)] == ["i", "j", "k", "z", "i1", "j1"]
