"""Element op codes shared by the CPU kernels, the GPU host code and the GPU device code.

An elementwise kernel takes its op as one of these integers (numba freezes module-level
ints into the compiled code, and the branch on a loop-invariant code is cheap), so one
compiled function per dtype serves every elementwise op.
"""

# Binary element ops f(a, b).
ADD, SUB, MUL, RELU_GRAD, TANH_GRAD, SIGMOID_GRAD, ASSIGN = range(7)
# Unary element ops on any numeric type.
NEG, RELU = range(2)
# Unary element ops on floating types.
TANH, SIGMOID = range(2)
