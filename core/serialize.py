"""Graphs as plain data: :func:`graph_to_nodes` and :func:`nodes_to_graph`.

A node is a dict with ``name``, ``type``, ``inputs`` (tensor names ``op:i``),
``control_inputs`` (op names), ``device`` (the requested device string), ``colocation``
(op names of its colocation groups, empty when alone) and ``attrs``.  Attribute values
are ``None``, bools, ints, floats, strings, tuples of ints, or numpy arrays (a ``Const``'s
value); the runtime maps these onto its protobuf messages, and anything else is refused.
Rebuilding gives the same names, requested devices, edges and colocation, so a master
can place a client's graph exactly as the client would.

>>> import core as tf
>>> g = tf.Graph()
>>> with g.as_default(), tf.device("/job:ps"):
...     v = tf.Variable(1.0, name="v")
>>> h = nodes_to_graph(graph_to_nodes(g.get_operations()))
>>> [(op.name, op.device) for op in h.get_operations()][:2]
[('v/initial_value', '/job:ps'), ('v', '/job:ps')]
"""

from __future__ import annotations

from typing import Iterable, Sequence

import numpy as np

from core.devices import DeviceSpec
from core.graph import Graph, GraphError, Operation

__all__ = ["graph_to_nodes", "nodes_to_graph", "extend_graph", "check_attr"]

_SCALARS = (bool, int, float, str, type(None))


def check_attr(op_name: str, key: str, value):
    """Return ``value`` if it is a plain attribute value; raise ``GraphError`` if not."""
    if isinstance(value, _SCALARS) or isinstance(value, np.ndarray):
        return value
    if isinstance(value, tuple) and all(isinstance(v, (int, type(None))) for v in value):
        return value
    if isinstance(value, list) and all(  # a list of shapes (an op's ``_output_shapes``)
            isinstance(s, tuple) and all(isinstance(v, (int, type(None))) for v in s)
            for s in value):
        return value
    raise GraphError(f"op {op_name!r}: attribute {key!r} = {value!r} cannot be serialized")


def graph_to_nodes(ops: Iterable[Operation]) -> list[dict]:
    """Plain-data nodes for ``ops`` (in the order given, which must list inputs first)."""
    nodes = []
    for op in ops:
        nodes.append({
            "name": op.name,
            "type": op.type,
            "inputs": [t.name for t in op.inputs],
            "control_inputs": [c.name for c in op.control_inputs],
            "device": op.device,
            "colocation": list(op._colocation),
            "attrs": {k: check_attr(op.name, k, v) for k, v in op.attrs.items()},
        })
    return nodes


def nodes_to_graph(nodes: Sequence[dict], graph: Graph | None = None) -> Graph:
    """Rebuild a graph from :func:`graph_to_nodes` output (into ``graph`` if given)."""
    graph = graph or Graph()
    extend_graph(graph, nodes)
    return graph


def extend_graph(graph: Graph, nodes: Sequence[dict]) -> list[Operation]:
    """Add ``nodes`` to ``graph``, skipping those whose names it already has (a client that
    extends its graph sends the new ops; resending old ones is harmless).  Returns the ops
    added.  Raises ``GraphError`` for an input the graph lacks."""
    added = []
    pending_controls = []
    for node in nodes:
        name = node["name"]
        if name in graph:
            continue
        inputs = []
        for tensor_name in node["inputs"]:
            try:
                inputs.append(graph.get_tensor_by_name(tensor_name))
            except KeyError:
                raise GraphError(f"node {name!r} takes {tensor_name!r}, which the graph lacks") from None
        attrs = dict(node.get("attrs") or {})
        if isinstance(attrs.get("value"), np.ndarray):
            attrs["value"].setflags(write=False)
        op = graph.create_op(node["type"], inputs, attrs, name=name + "/")
        op._set_device(DeviceSpec.from_string(node.get("device") or ""))
        op._colocation = tuple(node.get("colocation") or ())
        pending_controls.append((op, node.get("control_inputs") or ()))
        added.append(op)
    # Control inputs last: they may point at ops later in the list (a cycle is kept as is,
    # for the placers and backends to report).
    for op, controls in pending_controls:
        for c in controls:
            if c not in graph:
                raise GraphError(f"node {op.name!r} has control input {c!r}, which the graph lacks")
            op.add_control_input(graph.get_operation_by_name(c))
    return added
