"""The TVM TIR bridge: targets, LEIR -> PrimFunc lowering, building and running kernels."""
