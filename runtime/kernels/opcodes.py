"""Element op codes shared by the CPU kernels, the GPU host code and the GPU device code.

An elementwise kernel takes its op as one of these integers (numba freezes module-level
ints into the compiled code, and the branch on a loop-invariant code is cheap), so one
compiled function per dtype serves every elementwise op.
"""

# Binary element ops f(a, b).
ADD, SUB, MUL, RELU_GRAD, TANH_GRAD, SIGMOID_GRAD, ASSIGN = range(7)
# ... of the math family (core.ops_math): RealDiv, Pow, Maximum, Minimum,
# SquaredDifference, SqrtGrad(y, g), RsqrtGrad(y, g).
REAL_DIV, POW, MAXIMUM, MINIMUM, SQUARED_DIFFERENCE, SQRT_GRAD, RSQRT_GRAD = range(7, 14)
# Unary element ops on any numeric type.
NEG, RELU, SQUARE, ABS, SIGN = range(5)
# Unary element ops on floating types.
TANH, SIGMOID, EXP, LOG, SQRT, RSQRT = range(6)
