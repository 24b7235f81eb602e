from tether.v1 import policy_pb2 as _policy_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class VersionState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    VERSION_STATE_UNSPECIFIED: _ClassVar[VersionState]
    VERSION_STATE_CANDIDATE: _ClassVar[VersionState]
    VERSION_STATE_SHADOW: _ClassVar[VersionState]
    VERSION_STATE_CANARY: _ClassVar[VersionState]
    VERSION_STATE_LIVE: _ClassVar[VersionState]
    VERSION_STATE_RETIRED: _ClassVar[VersionState]
    VERSION_STATE_REJECTED: _ClassVar[VersionState]
VERSION_STATE_UNSPECIFIED: VersionState
VERSION_STATE_CANDIDATE: VersionState
VERSION_STATE_SHADOW: VersionState
VERSION_STATE_CANARY: VersionState
VERSION_STATE_LIVE: VersionState
VERSION_STATE_RETIRED: VersionState
VERSION_STATE_REJECTED: VersionState

class CheckCount(_message.Message):
    __slots__ = ("check", "count")
    CHECK_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    check: str
    count: int
    def __init__(self, check: _Optional[str] = ..., count: _Optional[int] = ...) -> None: ...

class VersionMetrics(_message.Message):
    __slots__ = ("requests", "steps", "interventions", "backups", "interventions_by_check", "episodes", "mean_return", "success_rate")
    REQUESTS_FIELD_NUMBER: _ClassVar[int]
    STEPS_FIELD_NUMBER: _ClassVar[int]
    INTERVENTIONS_FIELD_NUMBER: _ClassVar[int]
    BACKUPS_FIELD_NUMBER: _ClassVar[int]
    INTERVENTIONS_BY_CHECK_FIELD_NUMBER: _ClassVar[int]
    EPISODES_FIELD_NUMBER: _ClassVar[int]
    MEAN_RETURN_FIELD_NUMBER: _ClassVar[int]
    SUCCESS_RATE_FIELD_NUMBER: _ClassVar[int]
    requests: int
    steps: int
    interventions: int
    backups: int
    interventions_by_check: _containers.RepeatedCompositeFieldContainer[CheckCount]
    episodes: int
    mean_return: float
    success_rate: float
    def __init__(self, requests: _Optional[int] = ..., steps: _Optional[int] = ..., interventions: _Optional[int] = ..., backups: _Optional[int] = ..., interventions_by_check: _Optional[_Iterable[_Union[CheckCount, _Mapping]]] = ..., episodes: _Optional[int] = ..., mean_return: _Optional[float] = ..., success_rate: _Optional[float] = ...) -> None: ...

class VersionEntry(_message.Message):
    __slots__ = ("id", "name", "weights_sha256", "parent", "source", "created_at_s", "state", "reason", "loaded", "declared_id", "bundle_path", "metrics", "traffic_weight", "last_known_good")
    ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    WEIGHTS_SHA256_FIELD_NUMBER: _ClassVar[int]
    PARENT_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_S_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    LOADED_FIELD_NUMBER: _ClassVar[int]
    DECLARED_ID_FIELD_NUMBER: _ClassVar[int]
    BUNDLE_PATH_FIELD_NUMBER: _ClassVar[int]
    METRICS_FIELD_NUMBER: _ClassVar[int]
    TRAFFIC_WEIGHT_FIELD_NUMBER: _ClassVar[int]
    LAST_KNOWN_GOOD_FIELD_NUMBER: _ClassVar[int]
    id: int
    name: str
    weights_sha256: str
    parent: int
    source: str
    created_at_s: float
    state: VersionState
    reason: str
    loaded: bool
    declared_id: int
    bundle_path: str
    metrics: VersionMetrics
    traffic_weight: float
    last_known_good: bool
    def __init__(self, id: _Optional[int] = ..., name: _Optional[str] = ..., weights_sha256: _Optional[str] = ..., parent: _Optional[int] = ..., source: _Optional[str] = ..., created_at_s: _Optional[float] = ..., state: _Optional[_Union[VersionState, str]] = ..., reason: _Optional[str] = ..., loaded: _Optional[bool] = ..., declared_id: _Optional[int] = ..., bundle_path: _Optional[str] = ..., metrics: _Optional[_Union[VersionMetrics, _Mapping]] = ..., traffic_weight: _Optional[float] = ..., last_known_good: _Optional[bool] = ...) -> None: ...

class TrafficWeight(_message.Message):
    __slots__ = ("version", "weight")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_FIELD_NUMBER: _ClassVar[int]
    version: int
    weight: float
    def __init__(self, version: _Optional[int] = ..., weight: _Optional[float] = ...) -> None: ...

class ListVersionsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListVersionsResponse(_message.Message):
    __slots__ = ("versions", "live_version", "last_known_good", "traffic", "canary_version", "canary_fraction", "check_version", "check_fraction")
    VERSIONS_FIELD_NUMBER: _ClassVar[int]
    LIVE_VERSION_FIELD_NUMBER: _ClassVar[int]
    LAST_KNOWN_GOOD_FIELD_NUMBER: _ClassVar[int]
    TRAFFIC_FIELD_NUMBER: _ClassVar[int]
    CANARY_VERSION_FIELD_NUMBER: _ClassVar[int]
    CANARY_FRACTION_FIELD_NUMBER: _ClassVar[int]
    CHECK_VERSION_FIELD_NUMBER: _ClassVar[int]
    CHECK_FRACTION_FIELD_NUMBER: _ClassVar[int]
    versions: _containers.RepeatedCompositeFieldContainer[VersionEntry]
    live_version: int
    last_known_good: int
    traffic: _containers.RepeatedCompositeFieldContainer[TrafficWeight]
    canary_version: int
    canary_fraction: float
    check_version: int
    check_fraction: float
    def __init__(self, versions: _Optional[_Iterable[_Union[VersionEntry, _Mapping]]] = ..., live_version: _Optional[int] = ..., last_known_good: _Optional[int] = ..., traffic: _Optional[_Iterable[_Union[TrafficWeight, _Mapping]]] = ..., canary_version: _Optional[int] = ..., canary_fraction: _Optional[float] = ..., check_version: _Optional[int] = ..., check_fraction: _Optional[float] = ...) -> None: ...

class LoadBundleRequest(_message.Message):
    __slots__ = ("path", "make_live")
    PATH_FIELD_NUMBER: _ClassVar[int]
    MAKE_LIVE_FIELD_NUMBER: _ClassVar[int]
    path: str
    make_live: bool
    def __init__(self, path: _Optional[str] = ..., make_live: _Optional[bool] = ...) -> None: ...

class LoadBundleResponse(_message.Message):
    __slots__ = ("version",)
    VERSION_FIELD_NUMBER: _ClassVar[int]
    version: VersionEntry
    def __init__(self, version: _Optional[_Union[VersionEntry, _Mapping]] = ...) -> None: ...

class UnloadRequest(_message.Message):
    __slots__ = ("version",)
    VERSION_FIELD_NUMBER: _ClassVar[int]
    version: int
    def __init__(self, version: _Optional[int] = ...) -> None: ...

class UnloadResponse(_message.Message):
    __slots__ = ("version",)
    VERSION_FIELD_NUMBER: _ClassVar[int]
    version: VersionEntry
    def __init__(self, version: _Optional[_Union[VersionEntry, _Mapping]] = ...) -> None: ...

class SetTrafficRequest(_message.Message):
    __slots__ = ("weights",)
    WEIGHTS_FIELD_NUMBER: _ClassVar[int]
    weights: _containers.RepeatedCompositeFieldContainer[TrafficWeight]
    def __init__(self, weights: _Optional[_Iterable[_Union[TrafficWeight, _Mapping]]] = ...) -> None: ...

class SetTrafficResponse(_message.Message):
    __slots__ = ("weights",)
    WEIGHTS_FIELD_NUMBER: _ClassVar[int]
    weights: _containers.RepeatedCompositeFieldContainer[TrafficWeight]
    def __init__(self, weights: _Optional[_Iterable[_Union[TrafficWeight, _Mapping]]] = ...) -> None: ...

class PromoteRequest(_message.Message):
    __slots__ = ("version", "reason", "skip_gate")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    SKIP_GATE_FIELD_NUMBER: _ClassVar[int]
    version: int
    reason: str
    skip_gate: bool
    def __init__(self, version: _Optional[int] = ..., reason: _Optional[str] = ..., skip_gate: _Optional[bool] = ...) -> None: ...

class PromoteResponse(_message.Message):
    __slots__ = ("version",)
    VERSION_FIELD_NUMBER: _ClassVar[int]
    version: VersionEntry
    def __init__(self, version: _Optional[_Union[VersionEntry, _Mapping]] = ...) -> None: ...

class RollbackRequest(_message.Message):
    __slots__ = ("reason",)
    REASON_FIELD_NUMBER: _ClassVar[int]
    reason: str
    def __init__(self, reason: _Optional[str] = ...) -> None: ...

class RollbackResponse(_message.Message):
    __slots__ = ("live", "rolled_back")
    LIVE_FIELD_NUMBER: _ClassVar[int]
    ROLLED_BACK_FIELD_NUMBER: _ClassVar[int]
    live: VersionEntry
    rolled_back: int
    def __init__(self, live: _Optional[_Union[VersionEntry, _Mapping]] = ..., rolled_back: _Optional[int] = ...) -> None: ...

class ResumeRequest(_message.Message):
    __slots__ = ("reason",)
    REASON_FIELD_NUMBER: _ClassVar[int]
    reason: str
    def __init__(self, reason: _Optional[str] = ...) -> None: ...

class ResumeResponse(_message.Message):
    __slots__ = ("level", "operator")
    LEVEL_FIELD_NUMBER: _ClassVar[int]
    OPERATOR_FIELD_NUMBER: _ClassVar[int]
    level: _policy_pb2.DegradationLevel
    operator: str
    def __init__(self, level: _Optional[_Union[_policy_pb2.DegradationLevel, str]] = ..., operator: _Optional[str] = ...) -> None: ...

class ReloadRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ReloadFailure(_message.Message):
    __slots__ = ("path", "reason")
    PATH_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    path: str
    reason: str
    def __init__(self, path: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class ReloadResponse(_message.Message):
    __slots__ = ("loaded", "unchanged", "failed")
    LOADED_FIELD_NUMBER: _ClassVar[int]
    UNCHANGED_FIELD_NUMBER: _ClassVar[int]
    FAILED_FIELD_NUMBER: _ClassVar[int]
    loaded: _containers.RepeatedCompositeFieldContainer[VersionEntry]
    unchanged: _containers.RepeatedScalarFieldContainer[str]
    failed: _containers.RepeatedCompositeFieldContainer[ReloadFailure]
    def __init__(self, loaded: _Optional[_Iterable[_Union[VersionEntry, _Mapping]]] = ..., unchanged: _Optional[_Iterable[str]] = ..., failed: _Optional[_Iterable[_Union[ReloadFailure, _Mapping]]] = ...) -> None: ...
