from . import tensor_pb2 as _tensor_pb2
from . import graph_pb2 as _graph_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class GetStatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class DeviceAttributes(_message.Message):
    __slots__ = ("name", "device_type", "memory_limit_bytes")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DEVICE_TYPE_FIELD_NUMBER: _ClassVar[int]
    MEMORY_LIMIT_BYTES_FIELD_NUMBER: _ClassVar[int]
    name: str
    device_type: str
    memory_limit_bytes: int
    def __init__(self, name: _Optional[str] = ..., device_type: _Optional[str] = ..., memory_limit_bytes: _Optional[int] = ...) -> None: ...

class GetStatusResponse(_message.Message):
    __slots__ = ("task", "incarnation", "devices", "pid")
    TASK_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    DEVICES_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    task: str
    incarnation: str
    devices: _containers.RepeatedCompositeFieldContainer[DeviceAttributes]
    pid: int
    def __init__(self, task: _Optional[str] = ..., incarnation: _Optional[str] = ..., devices: _Optional[_Iterable[_Union[DeviceAttributes, _Mapping]]] = ..., pid: _Optional[int] = ...) -> None: ...

class SendTo(_message.Message):
    __slots__ = ("tensor", "devices")
    TENSOR_FIELD_NUMBER: _ClassVar[int]
    DEVICES_FIELD_NUMBER: _ClassVar[int]
    tensor: str
    devices: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, tensor: _Optional[str] = ..., devices: _Optional[_Iterable[str]] = ...) -> None: ...

class PartitionDef(_message.Message):
    __slots__ = ("handle", "ops", "fetches", "targets", "feeds", "send_to", "peer_addresses")
    class PeerAddressesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    HANDLE_FIELD_NUMBER: _ClassVar[int]
    OPS_FIELD_NUMBER: _ClassVar[int]
    FETCHES_FIELD_NUMBER: _ClassVar[int]
    TARGETS_FIELD_NUMBER: _ClassVar[int]
    FEEDS_FIELD_NUMBER: _ClassVar[int]
    SEND_TO_FIELD_NUMBER: _ClassVar[int]
    PEER_ADDRESSES_FIELD_NUMBER: _ClassVar[int]
    handle: str
    ops: _containers.RepeatedScalarFieldContainer[str]
    fetches: _containers.RepeatedScalarFieldContainer[str]
    targets: _containers.RepeatedScalarFieldContainer[str]
    feeds: _containers.RepeatedScalarFieldContainer[str]
    send_to: _containers.RepeatedCompositeFieldContainer[SendTo]
    peer_addresses: _containers.ScalarMap[str, str]
    def __init__(self, handle: _Optional[str] = ..., ops: _Optional[_Iterable[str]] = ..., fetches: _Optional[_Iterable[str]] = ..., targets: _Optional[_Iterable[str]] = ..., feeds: _Optional[_Iterable[str]] = ..., send_to: _Optional[_Iterable[_Union[SendTo, _Mapping]]] = ..., peer_addresses: _Optional[_Mapping[str, str]] = ...) -> None: ...

class RegisterGraphRequest(_message.Message):
    __slots__ = ("session_handle", "base_node_count", "nodes", "placement", "partitions", "config_json")
    SESSION_HANDLE_FIELD_NUMBER: _ClassVar[int]
    BASE_NODE_COUNT_FIELD_NUMBER: _ClassVar[int]
    NODES_FIELD_NUMBER: _ClassVar[int]
    PLACEMENT_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    CONFIG_JSON_FIELD_NUMBER: _ClassVar[int]
    session_handle: str
    base_node_count: int
    nodes: _containers.RepeatedCompositeFieldContainer[_graph_pb2.NodeDef]
    placement: _containers.RepeatedCompositeFieldContainer[_graph_pb2.PlacementEntry]
    partitions: _containers.RepeatedCompositeFieldContainer[PartitionDef]
    config_json: str
    def __init__(self, session_handle: _Optional[str] = ..., base_node_count: _Optional[int] = ..., nodes: _Optional[_Iterable[_Union[_graph_pb2.NodeDef, _Mapping]]] = ..., placement: _Optional[_Iterable[_Union[_graph_pb2.PlacementEntry, _Mapping]]] = ..., partitions: _Optional[_Iterable[_Union[PartitionDef, _Mapping]]] = ..., config_json: _Optional[str] = ...) -> None: ...

class RegisterGraphResponse(_message.Message):
    __slots__ = ("error", "node_count")
    ERROR_FIELD_NUMBER: _ClassVar[int]
    NODE_COUNT_FIELD_NUMBER: _ClassVar[int]
    error: _graph_pb2.ErrorStatus
    node_count: int
    def __init__(self, error: _Optional[_Union[_graph_pb2.ErrorStatus, _Mapping]] = ..., node_count: _Optional[int] = ...) -> None: ...

class RunGraphRequest(_message.Message):
    __slots__ = ("session_handle", "partition_handle", "step_id", "feeds", "trace", "timeout", "caller")
    SESSION_HANDLE_FIELD_NUMBER: _ClassVar[int]
    PARTITION_HANDLE_FIELD_NUMBER: _ClassVar[int]
    STEP_ID_FIELD_NUMBER: _ClassVar[int]
    FEEDS_FIELD_NUMBER: _ClassVar[int]
    TRACE_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    CALLER_FIELD_NUMBER: _ClassVar[int]
    session_handle: str
    partition_handle: str
    step_id: int
    feeds: _containers.RepeatedCompositeFieldContainer[_graph_pb2.NamedTensor]
    trace: bool
    timeout: float
    caller: str
    def __init__(self, session_handle: _Optional[str] = ..., partition_handle: _Optional[str] = ..., step_id: _Optional[int] = ..., feeds: _Optional[_Iterable[_Union[_graph_pb2.NamedTensor, _Mapping]]] = ..., trace: _Optional[bool] = ..., timeout: _Optional[float] = ..., caller: _Optional[str] = ...) -> None: ...

class RunGraphResponse(_message.Message):
    __slots__ = ("values", "stats", "error", "pushed")
    VALUES_FIELD_NUMBER: _ClassVar[int]
    STATS_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    PUSHED_FIELD_NUMBER: _ClassVar[int]
    values: _containers.RepeatedCompositeFieldContainer[_graph_pb2.NamedTensor]
    stats: _graph_pb2.StepStats
    error: _graph_pb2.ErrorStatus
    pushed: _containers.RepeatedScalarFieldContainer[bytes]
    def __init__(self, values: _Optional[_Iterable[_Union[_graph_pb2.NamedTensor, _Mapping]]] = ..., stats: _Optional[_Union[_graph_pb2.StepStats, _Mapping]] = ..., error: _Optional[_Union[_graph_pb2.ErrorStatus, _Mapping]] = ..., pushed: _Optional[_Iterable[bytes]] = ...) -> None: ...

class PushTensorResponse(_message.Message):
    __slots__ = ("key", "nbytes")
    KEY_FIELD_NUMBER: _ClassVar[int]
    NBYTES_FIELD_NUMBER: _ClassVar[int]
    key: str
    nbytes: int
    def __init__(self, key: _Optional[str] = ..., nbytes: _Optional[int] = ...) -> None: ...

class AbortStepRequest(_message.Message):
    __slots__ = ("step_id", "error")
    STEP_ID_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    step_id: int
    error: _graph_pb2.ErrorStatus
    def __init__(self, step_id: _Optional[int] = ..., error: _Optional[_Union[_graph_pb2.ErrorStatus, _Mapping]] = ...) -> None: ...

class AbortStepResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class CloseSessionRequest(_message.Message):
    __slots__ = ("session_handle",)
    SESSION_HANDLE_FIELD_NUMBER: _ClassVar[int]
    session_handle: str
    def __init__(self, session_handle: _Optional[str] = ...) -> None: ...

class CloseSessionResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...
