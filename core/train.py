"""Optimizers as TensorFlow 1.x writes them (``tf.train``): gradient descent, momentum
and Adam, with ``minimize``, ``compute_gradients`` and ``apply_gradients``.

An optimizer builds, per variable, TensorFlow's fused update op (``ApplyGradientDescent``,
``ApplyMomentum``, ``ApplyAdam``: :mod:`core.ops_train`) that updates the variable and its
slots in place.  Slots (momentum's accumulator, Adam's ``m`` and ``v``) are variables
created under ``colocate_with(var)``, so every placement keeps a variable, its slots and
its update on one device, as TensorFlow's slot creator does; Adam's ``beta1_power`` and
``beta2_power`` live with the first variable by name, as in TensorFlow.  The
hyper-parameters become scalar constants beside each update (TensorFlow shares one per
optimizer; one per update keeps an update's inputs on its device instead of sending a
scalar to every device, which changes no value).

>>> import core as tf
>>> g = tf.Graph()
>>> with g.as_default():
...     w = tf.Variable([1.0, -2.0], name="w")
...     loss = tf.reduce_sum(w * w)
...     step = tf.train.get_or_create_global_step()
...     train_op = tf.train.MomentumOptimizer(0.1, momentum=0.9).minimize(loss, global_step=step)
>>> train_op.type, [v.op.name for v in tf.global_variables(g)]
('AssignAdd', ['w', 'global_step', 'w/Momentum'])
>>> [op.type for op in g.get_operations() if op.type.startswith("Apply")]
['ApplyMomentum']
"""

from __future__ import annotations

from typing import Iterable, Sequence

import numpy as np

from core import builders as b
from core.autodiff import gradients
from core.dtypes import int64
from core.graph import Graph, GraphError, Operation, Tensor, get_default_graph

__all__ = ["Optimizer", "GradientDescentOptimizer", "MomentumOptimizer", "AdamOptimizer",
           "get_or_create_global_step", "get_global_step", "GLOBAL_STEP"]

#: The collection (and variable name) of the global step, as TensorFlow names it.
GLOBAL_STEP = "global_step"


def get_global_step(graph: Graph | None = None) -> b.Variable | None:
    """The graph's global step variable, or None."""
    found = (graph or get_default_graph()).get_collection(GLOBAL_STEP)
    return found[0] if found else None


def get_or_create_global_step(graph: Graph | None = None) -> b.Variable:
    """The graph's global step: an int64 scalar variable ``global_step`` starting at 0,
    not trainable, created on first call (as ``tf.train.get_or_create_global_step``).

    >>> import core as tf
    >>> g = tf.Graph()
    >>> with g.as_default():
    ...     s = get_or_create_global_step()
    >>> s is get_or_create_global_step(g), s.dtype.name, s.trainable
    (True, 'int64', False)
    """
    graph = graph or get_default_graph()
    step = get_global_step(graph)
    if step is None:
        with graph.as_default(), graph.name_scope(None):
            step = b.Variable(np.int64(0), name=GLOBAL_STEP, trainable=False)
        graph.add_to_collection(GLOBAL_STEP, step)
    return step


class Optimizer:
    """The base of the optimizers: computes gradients, creates slots, applies updates.

    Subclasses set ``_slot_names`` and implement ``_apply(grad, var)`` (the update op of
    one variable); Adam also ``_prepare``/``_finish``.  ``name`` is the name scope of the
    update ops and the suffix of the slots (``<var>/Momentum``).
    """

    _slot_names: tuple[str, ...] = ()

    def __init__(self, use_locking: bool = False, name: str = "Optimizer"):
        self._use_locking = bool(use_locking)
        self._name = name
        self._slots: dict[str, dict[str, b.Variable]] = {}  # slot name -> var op name -> slot

    # -- TensorFlow's API -----------------------------------------------------------------
    def get_name(self) -> str:
        return self._name

    def get_slot_names(self) -> list[str]:
        """The names of the slots this optimizer creates (``["m", "v"]`` for Adam)."""
        return sorted(self._slot_names)

    def get_slot(self, var: b.Variable, name: str) -> b.Variable | None:
        """The slot ``name`` of ``var`` (None when it has none yet)."""
        return self._slots.get(name, {}).get(var.op.name)

    def variables(self) -> list[b.Variable]:
        """The variables this optimizer created (slots, and Adam's beta powers)."""
        return [v for slots in self._slots.values() for v in slots.values()] + self._non_slot()

    def minimize(self, loss: Tensor, global_step: b.Variable | None = None,
                 var_list: Sequence[b.Variable] | None = None,
                 colocate_gradients_with_ops: bool = False, name: str | None = None,
                 grad_loss: Tensor | None = None) -> Operation:
        """``compute_gradients`` then ``apply_gradients``: the op of one training step.
        Raises ValueError when no variable gets a gradient."""
        grads_and_vars = self.compute_gradients(
            loss, var_list=var_list, colocate_gradients_with_ops=colocate_gradients_with_ops,
            grad_loss=grad_loss)
        if not any(g is not None for g, _ in grads_and_vars):
            raise ValueError(f"no gradients for any variable of {[v.name for _, v in grads_and_vars]}"
                             f" from loss {loss.name!r}")
        return self.apply_gradients(grads_and_vars, global_step=global_step, name=name)

    def compute_gradients(self, loss: Tensor, var_list: Sequence[b.Variable] | None = None,
                          colocate_gradients_with_ops: bool = False,
                          grad_loss: Tensor | None = None) -> list[tuple[Tensor | None, b.Variable]]:
        """``[(gradient or None, variable)]`` of ``loss`` for ``var_list`` (default: the
        graph's trainable variables); see :func:`core.gradients` for
        ``colocate_gradients_with_ops``."""
        loss = b.convert_to_tensor(loss)
        if var_list is None:
            var_list = b.trainable_variables(loss.graph)
        var_list = list(var_list)
        if not var_list:
            raise ValueError("no variables to optimize")
        for v in var_list:
            if not isinstance(v, b.Variable):
                raise TypeError(f"var_list holds {v!r}, not a Variable")
        grads = gradients(loss, var_list, grad_ys=None if grad_loss is None else [grad_loss],
                          colocate_gradients_with_ops=colocate_gradients_with_ops)
        return list(zip(grads, var_list))

    def apply_gradients(self, grads_and_vars: Iterable[tuple[Tensor | None, b.Variable]],
                        global_step: b.Variable | None = None, name: str | None = None) -> Operation:
        """The update ops of every ``(gradient, variable)`` pair with a gradient, grouped
        into one op (named ``name``, default the optimizer's); with ``global_step``, the
        returned op is its increment, run after the updates (as TensorFlow's)."""
        pairs = [(g, v) for g, v in grads_and_vars if g is not None]
        if not pairs:
            raise ValueError("apply_gradients() got no gradient for any variable")
        graph = pairs[0][1].graph
        with graph.as_default():
            for g, v in pairs:
                g = b.convert_to_tensor(g)
                if g.dtype != v.dtype or len(g.shape) != len(v.shape):
                    raise GraphError(f"gradient {g.name} ({g.dtype.name}, {g.shape}) does not "
                                     f"match variable {v.name} ({v.dtype.name}, {v.shape})")
            self._create_slots([v for _, v in pairs])
            with graph.name_scope(name or self._name) as scope:
                self._prepare([v for _, v in pairs])
                updates = []
                for g, v in pairs:
                    with graph.name_scope("update_" + v.op.name), b.colocate_with(v):
                        updates.append(self._apply(b.convert_to_tensor(g), v).op)
                if global_step is None:
                    return self._finish(updates, scope)
                # As TensorFlow: the updates' group is <name>/update, the increment <name>.
                with graph.control_dependencies([self._finish(updates, "update")]), \
                        b.colocate_with(global_step):
                    return b.assign_add(global_step, 1, name=scope).op

    # -- for subclasses ------------------------------------------------------------------------
    def _create_slots(self, var_list: list[b.Variable]) -> None:
        for v in var_list:
            for slot in self._slot_names:
                self._zeros_slot(v, slot)

    def _zeros_slot(self, var: b.Variable, slot: str) -> b.Variable:
        """A variable of ``var``'s shape and dtype, starting at zero, colocated with it and
        named ``<var>/<slot name>`` (a zero broadcast from a scalar: no array of the
        variable's size in the graph)."""
        table = self._slots.setdefault(slot, {})
        if var.op.name not in table:
            graph = var.graph
            slot_name = self._slot_name(slot)
            with graph.name_scope(var.op.name + "/"), b.colocate_with(var):
                zero = b.broadcast_to(b.constant(0, dtype=var.dtype, name=f"{slot_name}/zero"),
                                      var.shape, name=f"{slot_name}/Initializer")
                table[var.op.name] = b.Variable(zero, name=slot_name, trainable=False)
        return table[var.op.name]

    def _slot_name(self, slot: str) -> str:
        """TensorFlow's slot variable name: the optimizer's name, then ``_1``, ``_2`` for the
        later slots (``w/Adam``, ``w/Adam_1``)."""
        index = self._slot_names.index(slot)
        return self._name if index == 0 else f"{self._name}_{index}"

    def _scalar(self, value, var: b.Variable, name: str) -> Tensor:
        """A hyper-parameter as a scalar of the variable's dtype (a tensor passes as it is)."""
        if isinstance(value, (Tensor, b.Variable)):
            return b.convert_to_tensor(value, dtype=var.dtype)
        return b.constant(value, dtype=var.dtype, name=name)

    def _prepare(self, var_list: list[b.Variable]) -> None:
        pass

    def _apply(self, grad: Tensor, var: b.Variable) -> Tensor:
        raise NotImplementedError

    def _finish(self, updates: list[Operation], name: str) -> Operation:
        return b.group(*updates, name=name)

    def _non_slot(self) -> list[b.Variable]:
        return []

    def _update(self, op_type: str, inputs: list, **attrs) -> Tensor:
        g = inputs[0].graph
        tensors = [x.ref if isinstance(x, b.Variable) else b.convert_to_tensor(x) for x in inputs]
        return g.create_op(op_type, tensors, {"use_locking": self._use_locking, **attrs},
                           name=op_type).outputs[0]


class GradientDescentOptimizer(Optimizer):
    """``var -= learning_rate * grad`` (``ApplyGradientDescent``).

    >>> import core as tf
    >>> g = tf.Graph()
    >>> with g.as_default():
    ...     w = tf.Variable([3.0], name="w")
    ...     op = GradientDescentOptimizer(0.5).minimize(tf.reduce_sum(w * w))
    >>> op.type, [o.type for o in op.control_inputs]
    ('NoOp', ['ApplyGradientDescent'])
    """

    def __init__(self, learning_rate, use_locking: bool = False, name: str = "GradientDescent"):
        super().__init__(use_locking, name)
        self._learning_rate = learning_rate

    def _apply(self, grad, var):
        lr = self._scalar(self._learning_rate, var, "learning_rate")
        return self._update("ApplyGradientDescent", [var, lr, grad])


class MomentumOptimizer(Optimizer):
    """``accum = momentum * accum + grad; var -= learning_rate * accum`` (with
    ``use_nesterov``: ``var -= learning_rate * (grad + momentum * accum)``), one slot
    ``momentum`` per variable (``ApplyMomentum``).

    >>> import core as tf
    >>> g = tf.Graph()
    >>> with g.as_default():
    ...     w = tf.Variable([3.0], name="w")
    ...     opt = MomentumOptimizer(0.1, 0.9)
    ...     _ = opt.minimize(tf.reduce_sum(w * w))
    >>> opt.get_slot(w, "momentum").op.name, opt.get_slot(w, "momentum").op.colocation_groups()
    ('w/Momentum', ['loc:@w'])
    """

    _slot_names = ("momentum",)

    def __init__(self, learning_rate, momentum, use_locking: bool = False, name: str = "Momentum",
                 use_nesterov: bool = False):
        super().__init__(use_locking, name)
        self._learning_rate, self._momentum = learning_rate, momentum
        self._use_nesterov = bool(use_nesterov)

    def _apply(self, grad, var):
        lr = self._scalar(self._learning_rate, var, "learning_rate")
        mom = self._scalar(self._momentum, var, "momentum")
        return self._update("ApplyMomentum", [var, self.get_slot(var, "momentum"), lr, grad, mom],
                            use_nesterov=self._use_nesterov)


class AdamOptimizer(Optimizer):
    """Adam (Kingma & Ba, 2015, Algorithm 1 with the efficient step size of its Section 2),
    as TensorFlow's ``ApplyAdam``: slots ``m`` and ``v`` per variable, and the variables
    ``beta1_power`` and ``beta2_power`` (``beta^t``) colocated with the first variable by
    name, multiplied by ``beta1``/``beta2`` after every step's updates.

    >>> import core as tf
    >>> g = tf.Graph()
    >>> with g.as_default():
    ...     w = tf.Variable([3.0], name="w")
    ...     opt = AdamOptimizer(0.01)
    ...     _ = opt.minimize(tf.reduce_sum(w * w))
    >>> [v.op.name for v in opt.variables()]
    ['w/Adam', 'w/Adam_1', 'beta1_power', 'beta2_power']
    """

    _slot_names = ("m", "v")

    def __init__(self, learning_rate=0.001, beta1=0.9, beta2=0.999, epsilon=1e-8,
                 use_locking: bool = False, name: str = "Adam"):
        super().__init__(use_locking, name)
        self._lr, self._beta1, self._beta2, self._epsilon = learning_rate, beta1, beta2, epsilon
        self._powers: dict[str, tuple[b.Variable, b.Variable]] = {}  # graph id -> powers

    def _non_slot(self) -> list[b.Variable]:
        return [v for pair in self._powers.values() for v in pair]

    def _beta_powers(self, var: b.Variable) -> tuple[b.Variable, b.Variable]:
        return self._powers[id(var.graph)]

    def _prepare(self, var_list):
        key = id(var_list[0].graph)
        if key in self._powers:
            return
        first = min(var_list, key=lambda v: v.op.name)
        graph = first.graph
        with graph.name_scope(None), b.colocate_with(first):
            self._powers[key] = tuple(
                b.Variable(b.constant(beta, dtype=first.dtype, name=f"{name}/initial_value"),
                           name=name, trainable=False)
                for beta, name in ((self._beta1, "beta1_power"), (self._beta2, "beta2_power")))

    def _apply(self, grad, var):
        b1_power, b2_power = self._beta_powers(var)
        scalars = [self._scalar(x, var, n) for x, n in ((self._lr, "learning_rate"),
                                                         (self._beta1, "beta1"),
                                                         (self._beta2, "beta2"),
                                                         (self._epsilon, "epsilon"))]
        return self._update("ApplyAdam", [var, self.get_slot(var, "m"), self.get_slot(var, "v"),
                                          b1_power.value(), b2_power.value(), *scalars, grad])

    def _finish(self, updates, name):
        b1_power, b2_power = self._powers[id(updates[0].graph)]
        graph = updates[0].graph
        with graph.control_dependencies(updates), b.colocate_with(b1_power):
            new1 = b1_power.assign(b1_power * self._scalar(self._beta1, b1_power, "beta1"),
                                   name="update_beta1")
            new2 = b2_power.assign(b2_power * self._scalar(self._beta2, b2_power, "beta2"),
                                   name="update_beta2")
        return b.group(*updates, new1, new2, name=name)
