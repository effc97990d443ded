"""GraphDef import and export in TensorFlow's wire format.

:func:`import_graph_def` reads a TensorFlow ``GraphDef`` (a message, its bytes, or a
``.pb``/``.pbtxt`` file) into the default graph as TensorFlow's own does, and
:meth:`core.Graph.as_graph_def` / :func:`graph_to_graph_def` write one that TensorFlow
imports and runs.  The messages come from ``core/protos/tf_graph.proto`` (TensorFlow's
field numbers, our own package), so no TensorFlow is needed.

The op table is the contract: a NodeDef's op type is the table's type or its
``tf_type``; the inputs TensorFlow takes as constant tensors and the table keeps as
attrs (``OpDef.const_inputs``) are folded from their ``Const`` producers on import and
written back out as ``Const`` nodes on export.  What differs only in spelling (TF's
``keep_dims`` for our ``keepdims``, the type attrs ``T``/``Tidx`` that TF's kernels are
chosen by) lives in the small per-op table :data:`TF_ATTRS` below.

>>> import core as tf
>>> g = tf.Graph()
>>> with g.as_default(), tf.device("/cpu:0"):
...     x = tf.placeholder(tf.float32, (None, 3), name="x")
...     y = tf.reduce_sum(tf.relu(x), axis=1, name="y")
>>> gd = g.as_graph_def()
>>> [(n.name, n.op, list(n.input)) for n in gd.node]
[('x', 'Placeholder', []), ('Relu', 'Relu', ['x']), ('y/axis', 'Const', []), ('y', 'Sum', ['Relu', 'y/axis'])]
>>> h = tf.Graph()
>>> with h.as_default():
...     y2, = import_graph_def(gd.SerializeToString(), return_elements=["y:0"])
>>> y2.name, y2.op.get_attr("axis"), y2.op.device
('import/y:0', (1,), '/device:CPU:0')
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
from google.protobuf import text_format
from google.protobuf.message import DecodeError

from core.devices import DeviceSpec, InvalidDeviceSpec
from core.dtypes import ALL_DTYPES, as_dtype
from core.graph import (Graph, GraphCycleError, GraphError, Operation, Tensor, get_default_graph,
                        topological_positions)
from core.ops import UnknownOpType, get_op_def
from core.protos import tf_graph_pb2 as pb

__all__ = ["import_graph_def", "graph_to_graph_def", "write_graph", "read_graph_def",
           "GraphDefError", "UnsupportedOpError", "TFAttrs", "TF_ATTRS", "GraphDef",
           "NodeDef", "dtype_to_proto", "dtype_from_proto", "tensor_to_proto",
           "tensor_from_proto"]

GraphDef = pb.GraphDef
NodeDef = pb.NodeDef

#: The GraphDef version we write (TensorFlow 2.21's producer number).
PRODUCER = 2474


class GraphDefError(GraphError):
    """A GraphDef that cannot be read or imported; the message names the file, node,
    input or attribute at fault (also in ``source``, ``node``)."""

    def __init__(self, message: str, source: str | None = None, node: str | None = None):
        self.source, self.node = source, node
        super().__init__(f"{source}: {message}" if source else message)


class UnsupportedOpError(GraphDefError):
    """Op types the table does not have; ``counts``: op type -> how many nodes use it."""

    def __init__(self, counts: Mapping[str, int], source: str | None = None, notes=None):
        self.counts = dict(counts)
        listed = ", ".join(f"{t} ({n} node{'s' if n > 1 else ''}{(notes or {}).get(t, '')})"
                           for t, n in sorted(self.counts.items()))
        super().__init__(f"the graph uses op types the op table does not have: {listed}",
                         source)


# --- dtypes, shapes, tensors -----------------------------------------------------------

_DT = {"float16": pb.DT_HALF, "float32": pb.DT_FLOAT, "float64": pb.DT_DOUBLE,
       "int32": pb.DT_INT32, "int64": pb.DT_INT64, "bool": pb.DT_BOOL}
_DT_NAME = {v: k for k, v in _DT.items()}
_REF = 100  # a reference type is its value type + 100 (a variable's output)


def dtype_to_proto(dtype) -> int:
    """TensorFlow's ``DataType`` enum value of ``dtype``.

    >>> dtype_to_proto("float32") == pb.DT_FLOAT
    True
    """
    return _DT[as_dtype(dtype).name]


def dtype_from_proto(value: int, where: str = "") -> str:
    """Our dtype name of TensorFlow's enum ``value`` (reference types as their values);
    a type we lack raises :class:`GraphDefError` naming it and ``where``."""
    name = _DT_NAME.get(value - _REF if value > _REF else value)
    if name is None:
        label = pb.DataType.Name(value) if value in pb.DataType.values() else str(value)
        raise GraphDefError(f"{where}dtype {label} is not supported; supported: "
                            f"{sorted(pb.DataType.Name(v) for v in _DT.values())}")
    return name


def _shape_to_proto(shape) -> pb.TensorShapeProto:
    return pb.TensorShapeProto(dim=[pb.TensorShapeProto.Dim(size=-1 if d is None else int(d))
                                    for d in shape])


def _shape_from_proto(proto: pb.TensorShapeProto, where: str) -> tuple:
    if proto.unknown_rank:
        raise GraphDefError(f"{where}has a shape of unknown rank; give it a rank (or map it "
                            f"with input_map)")
    return tuple(None if d.size < 0 else int(d.size) for d in proto.dim)


_VALUE_FIELD = {"float16": "half_val", "float32": "float_val", "float64": "double_val",
                "int32": "int_val", "int64": "int64_val", "bool": "bool_val"}


def tensor_to_proto(value) -> pb.TensorProto:
    """A TensorProto holding ``value`` (any array-like of a supported dtype), its bytes
    in ``tensor_content`` as TensorFlow writes them."""
    arr = np.asarray(value)
    name = as_dtype(arr.dtype).name
    return pb.TensorProto(dtype=_DT[name], tensor_shape=_shape_to_proto(arr.shape),
                          tensor_content=arr.astype(arr.dtype.newbyteorder("<")).tobytes())


def tensor_from_proto(proto: pb.TensorProto, where: str = "") -> np.ndarray:
    """The numpy array of a TensorProto (``tensor_content`` or the typed value fields;
    fewer values than elements repeat the last one, as TensorFlow reads them)."""
    name = dtype_from_proto(proto.dtype, where)
    dtype = np.dtype(name).newbyteorder("<")
    shape = _shape_from_proto(proto.tensor_shape, where)
    if any(d is None for d in shape):
        raise GraphDefError(f"{where}a constant tensor has an unknown dimension: {shape}")
    count = int(np.prod(shape, dtype=np.int64))
    if proto.tensor_content:
        if len(proto.tensor_content) != count * dtype.itemsize:
            raise GraphDefError(f"{where}tensor_content has {len(proto.tensor_content)} bytes, "
                                f"a {name} tensor of shape {shape} needs {count * dtype.itemsize}")
        arr = np.frombuffer(proto.tensor_content, dtype)
    else:
        values = list(getattr(proto, _VALUE_FIELD[name]))
        if name == "float16":
            values = np.array(values, np.uint16).view(np.float16)
        values = np.asarray(values, dtype)
        if len(values) > count:
            raise GraphDefError(f"{where}{len(values)} values for a tensor of shape {shape}")
        if len(values) < count:
            fill = values[-1] if len(values) else np.zeros((), dtype)
            values = np.concatenate([values, np.full(count - len(values), fill, dtype)])
        arr = values
    arr = np.array(arr.reshape(shape), dtype=np.dtype(name))
    arr.setflags(write=False)
    return arr


# --- the per-op attribute table --------------------------------------------------------

@dataclass(frozen=True)
class TFAttrs:
    """How one op type's attrs are spelled in TensorFlow (only where they differ).

    ``types``: TensorFlow's type attrs (``T``, ``Tidx``, ``U``...) -> where their dtype
    comes from on export: ``"data<k>"`` our k-th input, ``"in<k>"`` TensorFlow's k-th
    input (a folded constant input is int32; negative k counts from the end),
    ``"out<k>"`` the k-th output; they are dropped on import.  ``count_attr``: TF's attr
    counting the data inputs (ConcatV2's and AddN's ``N``); ``renamed``: our attr ->
    TF's; ``defaults``: attrs TF's op needs that ours lacks (written on export, dropped
    on import when equal); ``dropped``: our attrs TF's op does not have; ``shapes``: our
    attrs that TF holds as a TensorShapeProto.
    """

    types: Mapping[str, str] = field(default_factory=lambda: {"T": "data0"})
    count_attr: str | None = None
    renamed: Mapping[str, str] = field(default_factory=dict)
    defaults: Mapping[str, object] = field(default_factory=dict)
    dropped: tuple[str, ...] = ()
    shapes: tuple[str, ...] = ()


def _typed(**types: str) -> TFAttrs:
    return TFAttrs(types=types)


_NONE = TFAttrs(types={})
_SOURCE = TFAttrs(types={}, shapes=("shape",))
_REDUCE = TFAttrs(types={"T": "data0", "Tidx": "in1"}, renamed={"keepdims": "keep_dims"})
_RANDOM = _typed(T="in0")  # the shape input's type; ``dtype`` (the output's) is ours

#: Our op type -> its TensorFlow spelling of attrs; op types not listed use ``TFAttrs()``
#: (``T`` from input 0, our attrs as they are: the ops added since take TF's names).
TF_ATTRS: dict[str, TFAttrs] = {
    "Const": TFAttrs(types={}, dropped=("shape",)),
    "Placeholder": _SOURCE,
    "Variable": TFAttrs(types={}, shapes=("shape",),
                        defaults={"container": "", "shared_name": ""}),
    "NoOp": _NONE,
    "Cast": _NONE,  # SrcT and DstT are ours
    "Assign": TFAttrs(defaults={"validate_shape": True, "use_locking": True}),
    "AssignAdd": TFAttrs(defaults={"use_locking": False}),
    "AssignSub": TFAttrs(defaults={"use_locking": False}),
    "Sum": _REDUCE,
    "Mean": _REDUCE,
    "BroadcastTo": _typed(T="data0", Tidx="in1"),
    "Reshape": _typed(T="data0", Tshape="in1"),
    "Transpose": _typed(T="data0", Tperm="in1"),
    "Concat": TFAttrs(types={"T": "data0", "Tidx": "in-1"}, count_attr="N"),
    "AddN": TFAttrs(count_attr="N"),
    "Slice": _typed(T="data0", Index="in1"),
    "FusedBatchNormV3": _typed(T="in0", U="in1"),
    "FusedBatchNormGradV3": _typed(T="in0", U="in3"),
    "GatherV2": _typed(Tparams="in0", Tindices="in1", Taxis="in2"),
    "UnsortedSegmentSum": _typed(T="in0", Tindices="in1", Tnumsegments="in2"),
    "SparseSoftmaxCrossEntropyWithLogits": _typed(T="in0", Tlabels="in1"),
    "Pad": _typed(T="data0", Tpaddings="in1"),
    "Tile": _typed(T="data0", Tmultiples="in1"),
    "SplitV": _typed(T="data0", Tlen="in1"),
    "StridedSlice": _typed(T="data0", Index="in1"),
    "StridedSliceGrad": _typed(T="in4", Index="in1"),  # (input 0 may be a run-time shape)
    "Fill": _typed(T="in1", index_type="in0"),
    "RandomStandardNormal": _RANDOM,
    "TruncatedNormal": _RANDOM,
    "RandomUniform": _RANDOM,
}

# Attr names whose string values are dtypes (an AttrValue ``type``, not ``s``).
_TYPE_ATTRS = {"dtype", "T", "DstT", "SrcT", "out_type", "Tidx", "Tshape", "Tperm", "Index",
               "Tindices", "Tpaddings", "Tmultiples", "Tnumsegments", "Tlabels", "U", "Taxis",
               "Tparams", "Targmax", "output_type", "seed_dtype"}


def _tf_attrs(op_type: str) -> TFAttrs:
    return TF_ATTRS.get(op_type, _DEFAULT_ATTRS)


_DEFAULT_ATTRS = TFAttrs()


def _attr_to_proto(key: str, value, shapes: tuple, where: str) -> pb.AttrValue:
    if hasattr(value, "np") and hasattr(value, "itemsize"):  # a core DType
        value = value.name
    if isinstance(value, bool):
        return pb.AttrValue(b=value)
    if isinstance(value, (int, np.integer)):
        return pb.AttrValue(i=int(value))
    if isinstance(value, (float, np.floating)):
        return pb.AttrValue(f=float(value))
    if isinstance(value, str):
        if key in _TYPE_ATTRS and value in ALL_DTYPES:
            return pb.AttrValue(type=_DT[value])
        return pb.AttrValue(s=value.encode())
    if isinstance(value, np.ndarray):
        return pb.AttrValue(tensor=tensor_to_proto(value))
    if isinstance(value, (tuple, list)):
        if key in shapes:
            return pb.AttrValue(shape=_shape_to_proto(value))
        if all(isinstance(v, (int, np.integer, type(None))) for v in value):
            return pb.AttrValue(list=pb.AttrValue.ListValue(
                i=[-1 if v is None else int(v) for v in value]))
        if all(isinstance(v, (float, int)) for v in value):
            return pb.AttrValue(list=pb.AttrValue.ListValue(f=[float(v) for v in value]))
        if all(isinstance(v, str) for v in value):
            return pb.AttrValue(list=pb.AttrValue.ListValue(s=[v.encode() for v in value]))
    raise GraphDefError(f"{where}attribute {key!r} = {value!r} has no GraphDef form")


def _attr_from_proto(key: str, attr: pb.AttrValue, where: str):
    kind = attr.WhichOneof("value")
    where = f"{where}attribute {key!r}: "
    if kind in ("b", "i", "f"):
        return getattr(attr, kind)
    if kind == "s":
        return attr.s.decode("utf-8", "replace")
    if kind == "type":
        return dtype_from_proto(attr.type, where)
    if kind == "shape":
        return _shape_from_proto(attr.shape, where)
    if kind == "tensor":
        return tensor_from_proto(attr.tensor, where)
    if kind == "list":
        lst = attr.list
        for part in ("i", "f", "b", "s", "type", "shape"):
            items = getattr(lst, part)
            if items:
                return _list_from_proto(part, items, where)
        if lst.tensor or lst.func:
            raise GraphDefError(f"{where}lists of tensors or functions are not supported")
        return ()
    if kind is None:
        return None
    raise GraphDefError(f"{where}{kind} values (functions, placeholders) are not supported")


def _list_from_proto(part: str, items, where: str) -> tuple:
    if part == "s":
        return tuple(s.decode("utf-8", "replace") for s in items)
    if part == "type":
        return tuple(dtype_from_proto(t, where) for t in items)
    if part == "shape":
        return tuple(_shape_from_proto(s, where) for s in items)
    return tuple(items)


# --- reading ---------------------------------------------------------------------------

def read_graph_def(graph_def) -> tuple[pb.GraphDef, str | None]:
    """``(message, source)``: ``graph_def`` (our GraphDef, TensorFlow's GraphDef, its
    serialized bytes, or the path of a binary ``.pb`` or text ``.pbtxt`` file) as our
    GraphDef message; ``source`` names the file (None otherwise)."""
    if isinstance(graph_def, pb.GraphDef):
        return graph_def, None
    if isinstance(graph_def, (bytes, bytearray, memoryview)):
        return _parse_binary(bytes(graph_def), "the GraphDef bytes"), None
    if isinstance(graph_def, (str, os.PathLike)):
        path = Path(graph_def)
        try:
            data = path.read_bytes()
        except OSError as e:
            raise GraphDefError(f"cannot read the GraphDef file: {e.strerror}", str(path)) from None
        if path.suffix in (".pbtxt", ".txt", ".prototxt"):
            try:
                return text_format.Parse(data.decode("utf-8"), pb.GraphDef()), str(path)
            except (text_format.ParseError, UnicodeDecodeError) as e:
                raise GraphDefError(f"not a text GraphDef: {e}", str(path)) from None
        return _parse_binary(data, str(path)), str(path)
    if hasattr(graph_def, "SerializeToString") and type(graph_def).__name__ == "GraphDef":
        return _parse_binary(graph_def.SerializeToString(), "the GraphDef message"), None
    raise TypeError(f"graph_def must be a GraphDef, its bytes or a file path, "
                    f"not {type(graph_def).__name__}")


def _parse_binary(data: bytes, source: str) -> pb.GraphDef:
    try:
        message = pb.GraphDef.FromString(data)
    except (DecodeError, RuntimeError) as e:
        raise GraphDefError(f"not a binary GraphDef ({len(data)} bytes): {e}", source) from None
    if data and not message.node and not message.ListFields():
        raise GraphDefError(f"not a binary GraphDef ({len(data)} bytes): no field parsed", source)
    return message


# --- import ----------------------------------------------------------------------------

def _split_input(text: str) -> tuple[str, int, bool]:
    """``"^a"`` -> ("a", -1, True); ``"a:2"`` -> ("a", 2, False); ``"a"`` -> ("a", 0, False)."""
    if text.startswith("^"):
        return text[1:], -1, True
    name, sep, index = text.rpartition(":")
    if sep and index.isdigit():
        return name, int(index), False
    return text, 0, False


def _map_key(key: str) -> str:
    """input_map keys as TensorFlow reads them: ``"x"`` is ``"x:0"``, ``"^x"`` the op."""
    if key.startswith("^"):
        return key
    name, index, _ = _split_input(key)
    return f"{name}:{index}"


@dataclass
class _Node:
    """A NodeDef being imported: its op def, data inputs and the const inputs folded."""

    proto: pb.NodeDef
    op_def: object
    inputs: list = field(default_factory=list)      # (name, index) of data inputs
    controls: list = field(default_factory=list)    # names
    folded: dict = field(default_factory=dict)      # our attr -> the Const node's name
    dynamic: bool = False  # a const input stays a tensor input (known at run time)


class _Importer:
    """One :func:`import_graph_def` call: checks, orders and creates the nodes."""

    def __init__(self, message: pb.GraphDef, source: str | None, graph: Graph, prefix: str,
                 input_map: Mapping):
        self.message, self.source, self.graph, self.prefix = message, source, graph, prefix
        self.input_map = {_map_key(k): v for k, v in (input_map or {}).items()}
        self.used_keys: set[str] = set()
        self.nodes: dict[str, _Node] = {}
        self.created: dict[str, Operation] = {}

    def error(self, message: str, node: str | None = None) -> GraphDefError:
        return GraphDefError(message, self.source, node)

    def check_versions(self) -> None:
        """Refuse a GraphDef written for newer consumers than we are (TF's rule)."""
        versions = self.message.versions
        if versions.min_consumer > PRODUCER or PRODUCER in versions.bad_consumers:
            bad = list(versions.bad_consumers)
            raise self.error(f"the GraphDef (producer {versions.producer}) needs a consumer of "
                             f"version >= {versions.min_consumer}"
                             + (f" and not in {bad}" if bad else "")
                             + f"; this reader is version {PRODUCER} (TensorFlow 2.21's)")

    def check_op_types(self) -> None:
        functions = {f.signature.name for f in self.message.library.function}
        unsupported, notes = Counter(), {}
        for node in self.message.node:
            try:
                op_def = get_op_def(node.op)
            except UnknownOpType:
                unsupported[node.op] += 1
                if node.op in functions:
                    notes[node.op] = "; a function of the graph's library: not supported"
                continue
            if op_def.tf_type and node.op == op_def.type != op_def.tf_type and op_def.const_inputs:
                # TensorFlow's older op of our name (Concat takes its axis first): its
                # inputs are not in the places the table's const_inputs say.
                unsupported[node.op] += 1
                notes[node.op] = f"; TensorFlow's older version of {op_def.tf_type}, " \
                                 f"which is supported"
        if unsupported:
            raise UnsupportedOpError(unsupported, self.source, notes)

    def collect(self) -> None:
        for proto in self.message.node:
            if proto.name in self.nodes:
                raise self.error(f"two nodes are named {proto.name!r}", proto.name)
            node = _Node(proto, get_op_def(proto.op))
            for text in proto.input:
                name, index, control = _split_input(text)
                (node.controls.append(name) if control else node.inputs.append((name, index)))
            self.nodes[proto.name] = node
        for node in self.nodes.values():
            self._fold_const_inputs(node)
            for name, index in node.inputs:
                self._check_exists(node, name, f"{name}:{index}", control=False)
            for name in node.controls:
                self._check_exists(node, name, "^" + name, control=True)

    def _check_exists(self, node: _Node, name: str, key: str, control: bool) -> None:
        if key in self.input_map:
            return
        if name not in self.nodes:
            kind = "control input" if control else "input"
            raise self.error(f"node {node.proto.name!r} has {kind} {name!r}, which is not a "
                             f"node of the graph (nor a key of input_map)", node.proto.name)

    def _fold_const_inputs(self, node: _Node) -> None:
        """Fold each const input (``OpDef.const_inputs``) that a Const node produces into
        its attr; one produced otherwise stays a tensor input where the op takes it so
        (a shape known only at run time), and is an error where it does not."""
        positions = node.op_def.const_inputs
        if not positions:
            return
        proto, n = node.proto, len(node.inputs)
        taken = sorted(((p if p >= 0 else n + p), attr) for p, attr in positions)
        dynamic = []
        for position, attr in reversed(taken):  # from the back, so positions stay valid
            if not 0 <= position < len(node.inputs):
                raise self.error(f"{proto.op} node {proto.name!r} has {n} inputs; its "
                                 f"{attr!r} input (position {position}) is missing", proto.name)
            name, index = node.inputs[position]
            producer = self.nodes.get(name)
            if f"{name}:{index}" not in self.input_map and producer is not None and \
                    producer.proto.op == "Const":
                node.inputs.pop(position)
                node.folded[attr] = name
            else:
                what = "an input_map value" if producer is None else \
                    f"a {producer.proto.op} node"
                dynamic.append(f"input {position} ({attr!r}) comes from {name!r}, {what}")
        limit = node.op_def.max_inputs
        if dynamic and limit is not None and len(node.inputs) > limit:
            raise self.error(
                f"{proto.op} node {proto.name!r}: {'; '.join(dynamic)}; the op table keeps "
                f"it as an attribute, so it must come from a Const node", proto.name)
        node.dynamic = bool(dynamic)

    def order(self) -> list[_Node]:
        """The nodes with every input before its consumers (ties in the GraphDef's
        order: :func:`core.graph.topological_positions`); a cycle raises
        :class:`GraphCycleError` naming its nodes."""
        names = list(self.nodes)
        index = {n: i for i, n in enumerate(names)}
        preds: list[set[int]] = []
        for name in names:
            node = self.nodes[name]
            p = {index[m] for m, _ in node.inputs if m in index}
            p.update(index[m] for m in node.controls if m in index)
            p.update(index[m] for m in node.folded.values())
            preds.append(p)
        order = topological_positions(preds)
        if len(order) != len(names):
            raise GraphCycleError(self._cycle(names, preds, set(order)))
        return [self.nodes[names[i]] for i in order]

    @staticmethod
    def _cycle(names, preds, done: set) -> list[str]:
        """Walk back from a node left out of the order through others left out until
        one repeats: that is a cycle."""
        i, seen, path = next(i for i in range(len(names)) if i not in done), {}, []
        while i not in seen:
            seen[i] = len(path)
            path.append(i)
            i = next(j for j in preds[i] if j not in done)
        return [names[j] for j in reversed(path[seen[i]:])]

    def attrs_of(self, node: _Node) -> dict:
        proto, op_type = node.proto, node.op_def.type
        table = _tf_attrs(op_type)
        where = f"{proto.op} node {proto.name!r}: "
        skip = set(table.types) | {table.count_attr}
        back = {tf: ours for ours, tf in table.renamed.items()}
        attrs = {}
        for key in sorted(proto.attr):
            # The shapes TF inferred stay only where a run-time shape input needs them.
            if key == "_output_shapes" and node.dynamic:
                attrs[key] = _attr_from_proto(key, proto.attr[key], where)
                continue
            if key.startswith("_") or key in skip:
                continue
            value = _attr_from_proto(key, proto.attr[key], where)
            if key in table.defaults and value == table.defaults[key]:
                continue
            attrs[back.get(key, key)] = value
        for attr, const_name in node.folded.items():
            value = tensor_from_proto(self.nodes[const_name].proto.attr["value"].tensor, where)
            attrs[attr] = int(value) if value.ndim == 0 else tuple(int(v) for v in value.ravel())
        if op_type == "Const":
            if "value" not in attrs:
                raise self.error(f"{where}has no 'value' attribute", proto.name)
            attrs["shape"] = attrs["value"].shape
            attrs["dtype"] = attrs["value"].dtype.name
        return attrs

    def tensor(self, node: _Node, name: str, index: int) -> Tensor:
        key = f"{name}:{index}"
        if key in self.input_map:
            self.used_keys.add(key)
            value = self.input_map[key]
            value = value.value() if hasattr(value, "value") and not isinstance(value, Tensor) \
                else value
            if not isinstance(value, Tensor):
                raise TypeError(f"input_map[{key!r}] must be a tensor, not {value!r}")
            return value
        op = self.created[name]
        if index >= len(op.outputs):
            raise self.error(f"node {node.proto.name!r} takes {key!r}, but {name!r} "
                             f"({op.type}) has {len(op.outputs)} outputs", node.proto.name)
        return op.outputs[index]

    def create(self, nodes: Sequence[_Node], skip: set[str]) -> None:
        graph = self.graph
        for node in nodes:
            proto = node.proto
            if proto.name in skip:
                continue
            inputs = [self.tensor(node, n, i) for n, i in node.inputs]
            op = graph.create_op(node.op_def.type, inputs, self.attrs_of(node),
                                 name=self.prefix + proto.name + "/")
            if proto.device:
                # The node's device, then the device scopes around the import applied to
                # it as to any new op's (a string scope fills the fields it leaves unset).
                try:
                    op._set_device(DeviceSpec.from_string(proto.device))
                except InvalidDeviceSpec as e:
                    raise self.error(f"node {proto.name!r}: {e}", proto.name) from None
                graph._apply_device_scopes(op)
            self.created[proto.name] = op
        for node in nodes:
            if node.proto.name in skip:
                continue
            op = self.created[node.proto.name]
            for name in node.controls:
                key = "^" + name
                if key in self.input_map:
                    self.used_keys.add(key)
                    target = self.input_map[key]
                    op.add_control_input(target.op if isinstance(target, Tensor) else target)
                elif name in self.created:
                    op.add_control_input(self.created[name])
            self._colocate(node, op)

    def _colocate(self, node: _Node, op: Operation) -> None:
        """Keep the node's ``_class: loc:@...`` groups and, as TensorFlow's importer does,
        give it the device of the first op it is colocated with that has one (a device
        function around the import saw each op alone)."""
        groups = set(op._colocation)
        targets = []
        if "_class" in node.proto.attr:
            for item in node.proto.attr["_class"].list.s:
                text = item.decode()
                if not text.startswith("loc:@"):
                    continue
                target = text[len("loc:@"):]
                if target not in self.created:
                    raise self.error(f"node {node.proto.name!r} is colocated with {target!r}, "
                                     f"which is not a node of the graph", node.proto.name)
                if target != node.proto.name:
                    groups.add(self.created[target].name)
                    targets.append(self.created[target])
        if groups:
            op._colocation = tuple(sorted(groups))
        device = next((t.device_spec for t in targets if t.device), None)
        if device is not None:
            op._set_device(device)


def import_graph_def(graph_def, input_map: Mapping | None = None,
                     return_elements: Sequence[str] | None = None, name: str | None = "import",
                     op_dict=None, producer_op_list=None):
    """Import a TensorFlow GraphDef into the default graph, as ``tf.import_graph_def``.

    ``graph_def``: a GraphDef message (ours or TensorFlow's), its serialized bytes, or the
    path of a binary ``.pb`` or text ``.pbtxt`` file.  Every node becomes an op named
    ``<name>/<node name>`` (``name=""``: the node's own name); op types, attributes,
    inputs (``^node``: a control input), requested devices and colocation (``_class:
    loc:@node``) are kept.  ``input_map`` maps the graph_def's tensor names (``"x:0"`` or
    ``"x"``; ``"^x"`` for control inputs) to tensors of the default graph, which replace
    them.  Returns the tensors (``"op:0"``) and ops (``"op"``) named by
    ``return_elements``, in that order (None when it is None).

    Errors: :class:`UnsupportedOpError` lists every op type the table lacks with its node
    count; :class:`GraphDefError` names the file that did not parse, the node whose
    input is missing (and the input), the attribute or op version not supported, and the
    ``input_map`` keys that match nothing; :class:`core.GraphCycleError` names a cycle.
    ``op_dict`` and ``producer_op_list`` are accepted for TensorFlow's signature and
    ignored, as in TensorFlow 2.
    """
    message, source = read_graph_def(graph_def)
    name = "import" if name is None else name
    graph = get_default_graph()
    importer = _Importer(message, source, graph, "", input_map or {})
    importer.check_versions()
    importer.check_op_types()
    importer.collect()
    unmatched = sorted(k for k in importer.input_map
                       if (k[1:] if k.startswith("^") else k.rpartition(":")[0])
                       not in importer.nodes)
    if unmatched:
        raise importer.error(f"input_map keys match no node of the graph: {unmatched}")
    nodes = importer.order()
    wanted = {_split_input(r)[0] for r in (return_elements or ())}
    skip = _folded_only(importer, wanted)
    with graph._lock:
        with graph.name_scope(name) as scope:
            importer.prefix = scope if name else ""
            for node in nodes:
                if node.proto.name not in skip and importer.prefix + node.proto.name in graph:
                    raise importer.error(f"the graph already has an op named "
                                         f"{importer.prefix + node.proto.name!r}")
            importer.create(nodes, skip)
    unused = sorted(set(importer.input_map) - importer.used_keys)
    if unused:
        raise importer.error(f"input_map keys are not inputs of any imported node: {unused}")
    if return_elements is None:
        return None
    return [_element(importer, r) for r in return_elements]


def _folded_only(importer: _Importer, wanted: set[str]) -> set[str]:
    """Const nodes whose every consumer folds them into an attr (not imported)."""
    folded = Counter(n for node in importer.nodes.values() for n in node.folded.values())
    other = Counter(n for node in importer.nodes.values()
                    for n in [m for m, _ in node.inputs] + node.controls)
    return {n for n in folded if not other[n] and n not in wanted}


def _element(importer: _Importer, text: str):
    name, index, _ = _split_input(text)
    if name not in importer.created:
        raise importer.error(f"return_elements names {text!r}, which is not a node of the "
                             f"graph" + (" (a constant folded into an attribute)"
                                         if name in importer.nodes else ""))
    op = importer.created[name]
    if ":" not in text:
        return op
    if index >= len(op.outputs):
        raise importer.error(f"return_elements names {text!r}, but {name!r} has "
                             f"{len(op.outputs)} outputs")
    return op.outputs[index]


# --- export ----------------------------------------------------------------------------

class _Writer:
    """Builds one GraphDef: node names kept, the extra Const nodes named uniquely."""

    def __init__(self, graph: Graph, add_shapes: bool):
        self.graph, self.add_shapes = graph, add_shapes
        self.message = pb.GraphDef(versions=pb.VersionDef(producer=PRODUCER))
        self.names = {op.name.lower() for op in graph.get_operations()}

    def fresh(self, name: str) -> str:
        candidate, k = name, 0
        while candidate.lower() in self.names:
            k += 1
            candidate = f"{name}_{k}"
        self.names.add(candidate.lower())
        return candidate

    def const(self, name: str, value, device: str) -> str:
        """Add a Const node holding ``value``; returns its (unique) name."""
        arr = np.asarray(value)
        if arr.dtype.kind in "iu" or arr.size == 0:  # shapes, axes: TF's default int32
            arr = arr.astype(np.int32)
        node = self.message.node.add(name=self.fresh(name), op="Const", device=device)
        node.attr["dtype"].type = _DT[as_dtype(arr.dtype).name]
        node.attr["value"].tensor.CopyFrom(tensor_to_proto(arr))
        if self.add_shapes:
            node.attr["_output_shapes"].list.shape.append(_shape_to_proto(arr.shape))
        return node.name

    def node(self, name: str, op_type: str, inputs: Sequence[str], device: str,
             attrs: Mapping[str, pb.AttrValue], shapes=None) -> pb.NodeDef:
        node = self.message.node.add(name=name, op=op_type, input=list(inputs), device=device)
        for key, value in attrs.items():
            node.attr[key].CopyFrom(value)
        if self.add_shapes and shapes is not None:
            node.attr["_output_shapes"].list.shape.extend(_shape_to_proto(s) for s in shapes)
        return node


def _input_name(t: Tensor) -> str:
    return t.op.name if t.value_index == 0 else f"{t.op.name}:{t.value_index}"


def _const_input_value(op: Operation, attr: str):
    value = op.attrs.get(attr)
    if value is None and attr == "axis":  # a reduction over every axis
        value = tuple(range(len(op.inputs[0].shape)))
    return value


def _write_op(writer: _Writer, op: Operation) -> None:
    op_def = op.op_def
    if op.type in _LOWERINGS:
        _LOWERINGS[op.type](writer, op)
        return
    table = _tf_attrs(op.type)
    where = f"{op.type} op {op.name!r}: "
    inputs = [(_input_name(t), t.dtype.name) for t in op.inputs]
    folded = set()
    for position, attr in sorted(op_def.const_inputs, key=lambda p: (p[0] < 0, p[0])):
        if attr not in op.attrs:  # given as a tensor input (a shape known at run time)
            continue
        name = writer.const(f"{op.name}/{attr}", _const_input_value(op, attr), op.device)
        at = position if position >= 0 else len(inputs) + 1 + position
        inputs.insert(at, (name, "int32"))
        folded.add(attr)
    attrs: dict[str, pb.AttrValue] = {}
    for key, source in table.types.items():
        dtype = _source_dtype(op, inputs, source)
        if dtype is not None:
            attrs[key] = pb.AttrValue(type=_DT[dtype])
    if table.count_attr:
        attrs[table.count_attr] = pb.AttrValue(i=len(op.inputs))
    for key, value in table.defaults.items():
        attrs[key] = _attr_to_proto(key, value, (), where)
    for key, value in op.attrs.items():
        if key in folded or key in table.dropped or key.startswith("_") or value is None:
            continue
        tf_key = table.renamed.get(key, key)
        attrs[tf_key] = _attr_to_proto(tf_key, value, table.shapes, where)
    if op._colocation:
        attrs["_class"] = pb.AttrValue(list=pb.AttrValue.ListValue(
            s=[f"loc:@{n}".encode() for n in op._colocation]))
    names = [n for n, _ in inputs] + ["^" + c.name for c in op.control_inputs]
    writer.node(op.name, op_def.tf_type or op.type, names, op.device, attrs,
                [t.shape for t in op.outputs])


def _source_dtype(op: Operation, inputs: list, source: str) -> str | None:
    """The dtype a ``TFAttrs.types`` source names (None where the op has no such tensor)."""
    kind, k = source.rstrip("-0123456789"), int(source.lstrip("datinou"))
    items = {"data": [t.dtype.name for t in op.inputs], "in": [d for _, d in inputs],
             "out": [t.dtype.name for t in op.outputs]}[kind]
    return items[k] if -len(items) <= k < len(items) else None


def _lower_softmax_grad(writer: _Writer, op: Operation) -> None:
    """TensorFlow has no SoftmaxGrad op: dx = (dy - sum(dy * y, -1, keepdims)) * y,
    written with Mul, Sum and Sub nodes; the last is named as the op."""
    y, dy = (_input_name(t) for t in op.inputs)
    t = pb.AttrValue(type=_DT[op.inputs[0].dtype.name])
    dev, base = op.device, op.name
    extra = {"_class": pb.AttrValue(list=pb.AttrValue.ListValue(
        s=[f"loc:@{n}".encode() for n in op._colocation]))} if op._colocation else {}
    prod = writer.node(writer.fresh(f"{base}/mul"), "Mul", [dy, y], dev, {"T": t, **extra})
    axis = writer.const(f"{base}/axis", np.array([-1], np.int32), dev)
    total = writer.node(writer.fresh(f"{base}/sum"), "Sum", [prod.name, axis], dev,
                        {"T": t, "Tidx": pb.AttrValue(type=pb.DT_INT32),
                         "keep_dims": pb.AttrValue(b=True), **extra})
    diff = writer.node(writer.fresh(f"{base}/sub"), "Sub", [dy, total.name], dev,
                       {"T": t, **extra})
    writer.node(op.name, "Mul", [diff.name, y] + ["^" + c.name for c in op.control_inputs],
                dev, {"T": t, **extra}, [op.outputs[0].shape])


#: Ops of the table TensorFlow has no op for, written as a few of its ops instead.
_LOWERINGS = {"SoftmaxGrad": _lower_softmax_grad}


def graph_to_graph_def(graph: Graph, add_shapes: bool = False,
                       ops: Sequence[Operation] | None = None) -> pb.GraphDef:
    """``graph`` (or only ``ops`` of it) as a TensorFlow GraphDef: TensorFlow's op types
    and attrs, the table's const inputs as Const nodes named ``<op>/<attr>``, requested
    devices and colocation (``_class``); with ``add_shapes``, each node's
    ``_output_shapes`` (unknown dimensions as -1).  See :meth:`core.Graph.as_graph_def`.
    """
    writer = _Writer(graph, add_shapes)
    for op in (graph.get_operations() if ops is None else ops):
        _write_op(writer, op)
    return writer.message


def write_graph(graph_or_graph_def, logdir, name: str, as_text: bool = True) -> str:
    """Write a graph (ours, as :func:`graph_to_graph_def`) or a GraphDef message to
    ``logdir/name`` as text (``as_text``) or binary, as ``tf.io.write_graph``; returns
    the path.

    >>> import tempfile, core as tf
    >>> g = tf.Graph()
    >>> with g.as_default():
    ...     _ = tf.constant(1.0, name="one")
    >>> path = write_graph(g, tempfile.mkdtemp(), "g.pbtxt")
    >>> read_graph_def(path)[0].node[0].name
    'one'
    """
    if isinstance(graph_or_graph_def, Graph):
        message = graph_to_graph_def(graph_or_graph_def)
    else:
        message, _ = read_graph_def(graph_or_graph_def)
    path = Path(logdir) / name
    path.parent.mkdir(parents=True, exist_ok=True)
    if as_text:
        path.write_text(text_format.MessageToString(message))
    else:
        path.write_bytes(message.SerializeToString())
    return str(path)
