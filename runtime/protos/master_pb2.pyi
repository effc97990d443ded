from . import tensor_pb2 as _tensor_pb2
from . import graph_pb2 as _graph_pb2
from . import worker_pb2 as _worker_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class CreateSessionRequest(_message.Message):
    __slots__ = ("graph", "config_json")
    GRAPH_FIELD_NUMBER: _ClassVar[int]
    CONFIG_JSON_FIELD_NUMBER: _ClassVar[int]
    graph: _graph_pb2.GraphDef
    config_json: str
    def __init__(self, graph: _Optional[_Union[_graph_pb2.GraphDef, _Mapping]] = ..., config_json: _Optional[str] = ...) -> None: ...

class CreateSessionResponse(_message.Message):
    __slots__ = ("session_handle", "error", "task", "cluster_json")
    SESSION_HANDLE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    TASK_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_JSON_FIELD_NUMBER: _ClassVar[int]
    session_handle: str
    error: _graph_pb2.ErrorStatus
    task: str
    cluster_json: str
    def __init__(self, session_handle: _Optional[str] = ..., error: _Optional[_Union[_graph_pb2.ErrorStatus, _Mapping]] = ..., task: _Optional[str] = ..., cluster_json: _Optional[str] = ...) -> None: ...

class RunStepRequest(_message.Message):
    __slots__ = ("session_handle", "base_node_count", "nodes", "feeds", "fetches", "targets", "trace", "shared_fetches")
    SESSION_HANDLE_FIELD_NUMBER: _ClassVar[int]
    BASE_NODE_COUNT_FIELD_NUMBER: _ClassVar[int]
    NODES_FIELD_NUMBER: _ClassVar[int]
    FEEDS_FIELD_NUMBER: _ClassVar[int]
    FETCHES_FIELD_NUMBER: _ClassVar[int]
    TARGETS_FIELD_NUMBER: _ClassVar[int]
    TRACE_FIELD_NUMBER: _ClassVar[int]
    SHARED_FETCHES_FIELD_NUMBER: _ClassVar[int]
    session_handle: str
    base_node_count: int
    nodes: _containers.RepeatedCompositeFieldContainer[_graph_pb2.NodeDef]
    feeds: _containers.RepeatedCompositeFieldContainer[_graph_pb2.NamedTensor]
    fetches: _containers.RepeatedScalarFieldContainer[str]
    targets: _containers.RepeatedScalarFieldContainer[str]
    trace: bool
    shared_fetches: bool
    def __init__(self, session_handle: _Optional[str] = ..., base_node_count: _Optional[int] = ..., nodes: _Optional[_Iterable[_Union[_graph_pb2.NodeDef, _Mapping]]] = ..., feeds: _Optional[_Iterable[_Union[_graph_pb2.NamedTensor, _Mapping]]] = ..., fetches: _Optional[_Iterable[str]] = ..., targets: _Optional[_Iterable[str]] = ..., trace: _Optional[bool] = ..., shared_fetches: _Optional[bool] = ...) -> None: ...

class SharedTensor(_message.Message):
    __slots__ = ("name", "meta", "shm")
    NAME_FIELD_NUMBER: _ClassVar[int]
    META_FIELD_NUMBER: _ClassVar[int]
    SHM_FIELD_NUMBER: _ClassVar[int]
    name: str
    meta: _tensor_pb2.TensorMeta
    shm: _tensor_pb2.ShmRef
    def __init__(self, name: _Optional[str] = ..., meta: _Optional[_Union[_tensor_pb2.TensorMeta, _Mapping]] = ..., shm: _Optional[_Union[_tensor_pb2.ShmRef, _Mapping]] = ...) -> None: ...

class RunStepResponse(_message.Message):
    __slots__ = ("values", "error", "new_placement", "placement_log", "stats", "node_count", "shared_values")
    VALUES_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    NEW_PLACEMENT_FIELD_NUMBER: _ClassVar[int]
    PLACEMENT_LOG_FIELD_NUMBER: _ClassVar[int]
    STATS_FIELD_NUMBER: _ClassVar[int]
    NODE_COUNT_FIELD_NUMBER: _ClassVar[int]
    SHARED_VALUES_FIELD_NUMBER: _ClassVar[int]
    values: _containers.RepeatedCompositeFieldContainer[_graph_pb2.NamedTensor]
    error: _graph_pb2.ErrorStatus
    new_placement: _containers.RepeatedCompositeFieldContainer[_graph_pb2.PlacementEntry]
    placement_log: _containers.RepeatedScalarFieldContainer[str]
    stats: _graph_pb2.StepStats
    node_count: int
    shared_values: _containers.RepeatedCompositeFieldContainer[SharedTensor]
    def __init__(self, values: _Optional[_Iterable[_Union[_graph_pb2.NamedTensor, _Mapping]]] = ..., error: _Optional[_Union[_graph_pb2.ErrorStatus, _Mapping]] = ..., new_placement: _Optional[_Iterable[_Union[_graph_pb2.PlacementEntry, _Mapping]]] = ..., placement_log: _Optional[_Iterable[str]] = ..., stats: _Optional[_Union[_graph_pb2.StepStats, _Mapping]] = ..., node_count: _Optional[int] = ..., shared_values: _Optional[_Iterable[_Union[SharedTensor, _Mapping]]] = ...) -> None: ...

class ListDevicesRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListDevicesResponse(_message.Message):
    __slots__ = ("devices", "cluster_json")
    DEVICES_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_JSON_FIELD_NUMBER: _ClassVar[int]
    devices: _containers.RepeatedCompositeFieldContainer[_worker_pb2.DeviceAttributes]
    cluster_json: str
    def __init__(self, devices: _Optional[_Iterable[_Union[_worker_pb2.DeviceAttributes, _Mapping]]] = ..., cluster_json: _Optional[str] = ...) -> None: ...
