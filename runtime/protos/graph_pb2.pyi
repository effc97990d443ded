from . import tensor_pb2 as _tensor_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class TensorValue(_message.Message):
    __slots__ = ("meta", "data")
    META_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    meta: _tensor_pb2.TensorMeta
    data: bytes
    def __init__(self, meta: _Optional[_Union[_tensor_pb2.TensorMeta, _Mapping]] = ..., data: _Optional[bytes] = ...) -> None: ...

class NamedTensor(_message.Message):
    __slots__ = ("name", "value")
    NAME_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    name: str
    value: TensorValue
    def __init__(self, name: _Optional[str] = ..., value: _Optional[_Union[TensorValue, _Mapping]] = ...) -> None: ...

class IntList(_message.Message):
    __slots__ = ("values", "is_none")
    VALUES_FIELD_NUMBER: _ClassVar[int]
    IS_NONE_FIELD_NUMBER: _ClassVar[int]
    values: _containers.RepeatedScalarFieldContainer[int]
    is_none: _containers.RepeatedScalarFieldContainer[bool]
    def __init__(self, values: _Optional[_Iterable[int]] = ..., is_none: _Optional[_Iterable[bool]] = ...) -> None: ...

class ShapeList(_message.Message):
    __slots__ = ("shapes",)
    SHAPES_FIELD_NUMBER: _ClassVar[int]
    shapes: _containers.RepeatedCompositeFieldContainer[IntList]
    def __init__(self, shapes: _Optional[_Iterable[_Union[IntList, _Mapping]]] = ...) -> None: ...

class AttrValue(_message.Message):
    __slots__ = ("none", "b", "i", "f", "s", "ints", "tensor", "shapes")
    NONE_FIELD_NUMBER: _ClassVar[int]
    B_FIELD_NUMBER: _ClassVar[int]
    I_FIELD_NUMBER: _ClassVar[int]
    F_FIELD_NUMBER: _ClassVar[int]
    S_FIELD_NUMBER: _ClassVar[int]
    INTS_FIELD_NUMBER: _ClassVar[int]
    TENSOR_FIELD_NUMBER: _ClassVar[int]
    SHAPES_FIELD_NUMBER: _ClassVar[int]
    none: bool
    b: bool
    i: int
    f: float
    s: str
    ints: IntList
    tensor: TensorValue
    shapes: ShapeList
    def __init__(self, none: _Optional[bool] = ..., b: _Optional[bool] = ..., i: _Optional[int] = ..., f: _Optional[float] = ..., s: _Optional[str] = ..., ints: _Optional[_Union[IntList, _Mapping]] = ..., tensor: _Optional[_Union[TensorValue, _Mapping]] = ..., shapes: _Optional[_Union[ShapeList, _Mapping]] = ...) -> None: ...

class NodeDef(_message.Message):
    __slots__ = ("name", "type", "inputs", "control_inputs", "device", "colocation", "attrs")
    class AttrsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: AttrValue
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[AttrValue, _Mapping]] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    INPUTS_FIELD_NUMBER: _ClassVar[int]
    CONTROL_INPUTS_FIELD_NUMBER: _ClassVar[int]
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    COLOCATION_FIELD_NUMBER: _ClassVar[int]
    ATTRS_FIELD_NUMBER: _ClassVar[int]
    name: str
    type: str
    inputs: _containers.RepeatedScalarFieldContainer[str]
    control_inputs: _containers.RepeatedScalarFieldContainer[str]
    device: str
    colocation: _containers.RepeatedScalarFieldContainer[str]
    attrs: _containers.MessageMap[str, AttrValue]
    def __init__(self, name: _Optional[str] = ..., type: _Optional[str] = ..., inputs: _Optional[_Iterable[str]] = ..., control_inputs: _Optional[_Iterable[str]] = ..., device: _Optional[str] = ..., colocation: _Optional[_Iterable[str]] = ..., attrs: _Optional[_Mapping[str, AttrValue]] = ...) -> None: ...

class GraphDef(_message.Message):
    __slots__ = ("node",)
    NODE_FIELD_NUMBER: _ClassVar[int]
    node: _containers.RepeatedCompositeFieldContainer[NodeDef]
    def __init__(self, node: _Optional[_Iterable[_Union[NodeDef, _Mapping]]] = ...) -> None: ...

class PlacementEntry(_message.Message):
    __slots__ = ("op", "device")
    OP_FIELD_NUMBER: _ClassVar[int]
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    op: str
    device: str
    def __init__(self, op: _Optional[str] = ..., device: _Optional[str] = ...) -> None: ...

class ErrorStatus(_message.Message):
    __slots__ = ("type", "message", "args_json", "task")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    ARGS_JSON_FIELD_NUMBER: _ClassVar[int]
    TASK_FIELD_NUMBER: _ClassVar[int]
    type: str
    message: str
    args_json: str
    task: str
    def __init__(self, type: _Optional[str] = ..., message: _Optional[str] = ..., args_json: _Optional[str] = ..., task: _Optional[str] = ...) -> None: ...

class OpStats(_message.Message):
    __slots__ = ("op", "type", "device", "thread", "start", "end", "cores")
    OP_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    THREAD_FIELD_NUMBER: _ClassVar[int]
    START_FIELD_NUMBER: _ClassVar[int]
    END_FIELD_NUMBER: _ClassVar[int]
    CORES_FIELD_NUMBER: _ClassVar[int]
    op: str
    type: str
    device: str
    thread: int
    start: float
    end: float
    cores: int
    def __init__(self, op: _Optional[str] = ..., type: _Optional[str] = ..., device: _Optional[str] = ..., thread: _Optional[int] = ..., start: _Optional[float] = ..., end: _Optional[float] = ..., cores: _Optional[int] = ...) -> None: ...

class TransferStats(_message.Message):
    __slots__ = ("tensor", "src", "dst", "links", "bytes", "start", "end")
    TENSOR_FIELD_NUMBER: _ClassVar[int]
    SRC_FIELD_NUMBER: _ClassVar[int]
    DST_FIELD_NUMBER: _ClassVar[int]
    LINKS_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    START_FIELD_NUMBER: _ClassVar[int]
    END_FIELD_NUMBER: _ClassVar[int]
    tensor: str
    src: str
    dst: str
    links: _containers.RepeatedScalarFieldContainer[str]
    bytes: int
    start: float
    end: float
    def __init__(self, tensor: _Optional[str] = ..., src: _Optional[str] = ..., dst: _Optional[str] = ..., links: _Optional[_Iterable[str]] = ..., bytes: _Optional[int] = ..., start: _Optional[float] = ..., end: _Optional[float] = ...) -> None: ...

class MemoryStats(_message.Message):
    __slots__ = ("device", "time", "bytes")
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    device: str
    time: float
    bytes: int
    def __init__(self, device: _Optional[str] = ..., time: _Optional[float] = ..., bytes: _Optional[int] = ...) -> None: ...

class OOMStats(_message.Message):
    __slots__ = ("time", "device", "op", "tensor", "has_tensor", "requested", "in_use", "capacity")
    TIME_FIELD_NUMBER: _ClassVar[int]
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    OP_FIELD_NUMBER: _ClassVar[int]
    TENSOR_FIELD_NUMBER: _ClassVar[int]
    HAS_TENSOR_FIELD_NUMBER: _ClassVar[int]
    REQUESTED_FIELD_NUMBER: _ClassVar[int]
    IN_USE_FIELD_NUMBER: _ClassVar[int]
    CAPACITY_FIELD_NUMBER: _ClassVar[int]
    time: float
    device: str
    op: str
    tensor: str
    has_tensor: bool
    requested: int
    in_use: int
    capacity: int
    def __init__(self, time: _Optional[float] = ..., device: _Optional[str] = ..., op: _Optional[str] = ..., tensor: _Optional[str] = ..., has_tensor: _Optional[bool] = ..., requested: _Optional[int] = ..., in_use: _Optional[int] = ..., capacity: _Optional[int] = ...) -> None: ...

class SendStats(_message.Message):
    __slots__ = ("tensor", "dst", "start", "end")
    TENSOR_FIELD_NUMBER: _ClassVar[int]
    DST_FIELD_NUMBER: _ClassVar[int]
    START_FIELD_NUMBER: _ClassVar[int]
    END_FIELD_NUMBER: _ClassVar[int]
    tensor: str
    dst: str
    start: float
    end: float
    def __init__(self, tensor: _Optional[str] = ..., dst: _Optional[str] = ..., start: _Optional[float] = ..., end: _Optional[float] = ...) -> None: ...

class StepStats(_message.Message):
    __slots__ = ("ops", "transfers", "memory", "oom", "sends", "capacity", "start", "end")
    class CapacityEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    OPS_FIELD_NUMBER: _ClassVar[int]
    TRANSFERS_FIELD_NUMBER: _ClassVar[int]
    MEMORY_FIELD_NUMBER: _ClassVar[int]
    OOM_FIELD_NUMBER: _ClassVar[int]
    SENDS_FIELD_NUMBER: _ClassVar[int]
    CAPACITY_FIELD_NUMBER: _ClassVar[int]
    START_FIELD_NUMBER: _ClassVar[int]
    END_FIELD_NUMBER: _ClassVar[int]
    ops: _containers.RepeatedCompositeFieldContainer[OpStats]
    transfers: _containers.RepeatedCompositeFieldContainer[TransferStats]
    memory: _containers.RepeatedCompositeFieldContainer[MemoryStats]
    oom: _containers.RepeatedCompositeFieldContainer[OOMStats]
    sends: _containers.RepeatedCompositeFieldContainer[SendStats]
    capacity: _containers.ScalarMap[str, int]
    start: float
    end: float
    def __init__(self, ops: _Optional[_Iterable[_Union[OpStats, _Mapping]]] = ..., transfers: _Optional[_Iterable[_Union[TransferStats, _Mapping]]] = ..., memory: _Optional[_Iterable[_Union[MemoryStats, _Mapping]]] = ..., oom: _Optional[_Iterable[_Union[OOMStats, _Mapping]]] = ..., sends: _Optional[_Iterable[_Union[SendStats, _Mapping]]] = ..., capacity: _Optional[_Mapping[str, int]] = ..., start: _Optional[float] = ..., end: _Optional[float] = ...) -> None: ...
