from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ActionSource(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ACTION_SOURCE_UNSPECIFIED: _ClassVar[ActionSource]
    ACTION_SOURCE_POLICY: _ClassVar[ActionSource]
    ACTION_SOURCE_CLIPPED: _ClassVar[ActionSource]
    ACTION_SOURCE_BACKUP: _ClassVar[ActionSource]
    ACTION_SOURCE_HUMAN: _ClassVar[ActionSource]

class DegradationLevel(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DEGRADATION_LEVEL_UNSPECIFIED: _ClassVar[DegradationLevel]
    DEGRADATION_LEVEL_NORMAL: _ClassVar[DegradationLevel]
    DEGRADATION_LEVEL_RESTRICTED: _ClassVar[DegradationLevel]
    DEGRADATION_LEVEL_PAUSED: _ClassVar[DegradationLevel]
    DEGRADATION_LEVEL_TAKEOVER: _ClassVar[DegradationLevel]
ACTION_SOURCE_UNSPECIFIED: ActionSource
ACTION_SOURCE_POLICY: ActionSource
ACTION_SOURCE_CLIPPED: ActionSource
ACTION_SOURCE_BACKUP: ActionSource
ACTION_SOURCE_HUMAN: ActionSource
DEGRADATION_LEVEL_UNSPECIFIED: DegradationLevel
DEGRADATION_LEVEL_NORMAL: DegradationLevel
DEGRADATION_LEVEL_RESTRICTED: DegradationLevel
DEGRADATION_LEVEL_PAUSED: DegradationLevel
DEGRADATION_LEVEL_TAKEOVER: DegradationLevel

class PolicyVersion(_message.Message):
    __slots__ = ("policy_version", "weights_sha256", "name")
    POLICY_VERSION_FIELD_NUMBER: _ClassVar[int]
    WEIGHTS_SHA256_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    policy_version: int
    weights_sha256: str
    name: str
    def __init__(self, policy_version: _Optional[int] = ..., weights_sha256: _Optional[str] = ..., name: _Optional[str] = ...) -> None: ...

class SafetyVerdict(_message.Message):
    __slots__ = ("source", "checks", "check_names", "correction_norm", "joints")
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    CHECKS_FIELD_NUMBER: _ClassVar[int]
    CHECK_NAMES_FIELD_NUMBER: _ClassVar[int]
    CORRECTION_NORM_FIELD_NUMBER: _ClassVar[int]
    JOINTS_FIELD_NUMBER: _ClassVar[int]
    source: ActionSource
    checks: int
    check_names: _containers.RepeatedScalarFieldContainer[str]
    correction_norm: float
    joints: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, source: _Optional[_Union[ActionSource, str]] = ..., checks: _Optional[int] = ..., check_names: _Optional[_Iterable[str]] = ..., correction_norm: _Optional[float] = ..., joints: _Optional[_Iterable[int]] = ...) -> None: ...

class ServerTimings(_message.Message):
    __slots__ = ("queue_ns", "inference_ns", "safety_ns", "total_ns", "batch_size")
    QUEUE_NS_FIELD_NUMBER: _ClassVar[int]
    INFERENCE_NS_FIELD_NUMBER: _ClassVar[int]
    SAFETY_NS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_NS_FIELD_NUMBER: _ClassVar[int]
    BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    queue_ns: int
    inference_ns: int
    safety_ns: int
    total_ns: int
    batch_size: int
    def __init__(self, queue_ns: _Optional[int] = ..., inference_ns: _Optional[int] = ..., safety_ns: _Optional[int] = ..., total_ns: _Optional[int] = ..., batch_size: _Optional[int] = ...) -> None: ...

class InputTensor(_message.Message):
    __slots__ = ("name", "shape", "float32_values", "uint8_values")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    FLOAT32_VALUES_FIELD_NUMBER: _ClassVar[int]
    UINT8_VALUES_FIELD_NUMBER: _ClassVar[int]
    name: str
    shape: _containers.RepeatedScalarFieldContainer[int]
    float32_values: _containers.RepeatedScalarFieldContainer[float]
    uint8_values: bytes
    def __init__(self, name: _Optional[str] = ..., shape: _Optional[_Iterable[int]] = ..., float32_values: _Optional[_Iterable[float]] = ..., uint8_values: _Optional[bytes] = ...) -> None: ...

class ActionRequest(_message.Message):
    __slots__ = ("observation", "deterministic", "model_version", "client_id", "inputs")
    OBSERVATION_FIELD_NUMBER: _ClassVar[int]
    DETERMINISTIC_FIELD_NUMBER: _ClassVar[int]
    MODEL_VERSION_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    INPUTS_FIELD_NUMBER: _ClassVar[int]
    observation: _containers.RepeatedScalarFieldContainer[float]
    deterministic: bool
    model_version: int
    client_id: str
    inputs: _containers.RepeatedCompositeFieldContainer[InputTensor]
    def __init__(self, observation: _Optional[_Iterable[float]] = ..., deterministic: _Optional[bool] = ..., model_version: _Optional[int] = ..., client_id: _Optional[str] = ..., inputs: _Optional[_Iterable[_Union[InputTensor, _Mapping]]] = ...) -> None: ...

class ActionResponse(_message.Message):
    __slots__ = ("action", "log_prob", "status", "version", "safety", "timings", "degradation", "proposed_action", "horizon", "chunk", "proposed_chunk", "chunk_safety")
    ACTION_FIELD_NUMBER: _ClassVar[int]
    LOG_PROB_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    SAFETY_FIELD_NUMBER: _ClassVar[int]
    TIMINGS_FIELD_NUMBER: _ClassVar[int]
    DEGRADATION_FIELD_NUMBER: _ClassVar[int]
    PROPOSED_ACTION_FIELD_NUMBER: _ClassVar[int]
    HORIZON_FIELD_NUMBER: _ClassVar[int]
    CHUNK_FIELD_NUMBER: _ClassVar[int]
    PROPOSED_CHUNK_FIELD_NUMBER: _ClassVar[int]
    CHUNK_SAFETY_FIELD_NUMBER: _ClassVar[int]
    action: _containers.RepeatedScalarFieldContainer[float]
    log_prob: float
    status: str
    version: PolicyVersion
    safety: SafetyVerdict
    timings: ServerTimings
    degradation: DegradationLevel
    proposed_action: _containers.RepeatedScalarFieldContainer[float]
    horizon: int
    chunk: _containers.RepeatedScalarFieldContainer[float]
    proposed_chunk: _containers.RepeatedScalarFieldContainer[float]
    chunk_safety: _containers.RepeatedCompositeFieldContainer[SafetyVerdict]
    def __init__(self, action: _Optional[_Iterable[float]] = ..., log_prob: _Optional[float] = ..., status: _Optional[str] = ..., version: _Optional[_Union[PolicyVersion, _Mapping]] = ..., safety: _Optional[_Union[SafetyVerdict, _Mapping]] = ..., timings: _Optional[_Union[ServerTimings, _Mapping]] = ..., degradation: _Optional[_Union[DegradationLevel, str]] = ..., proposed_action: _Optional[_Iterable[float]] = ..., horizon: _Optional[int] = ..., chunk: _Optional[_Iterable[float]] = ..., proposed_chunk: _Optional[_Iterable[float]] = ..., chunk_safety: _Optional[_Iterable[_Union[SafetyVerdict, _Mapping]]] = ...) -> None: ...

class SessionOpen(_message.Message):
    __slots__ = ("robot_id", "spec_fingerprint", "obs_dim", "act_dim", "joint_names", "model_version")
    ROBOT_ID_FIELD_NUMBER: _ClassVar[int]
    SPEC_FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    OBS_DIM_FIELD_NUMBER: _ClassVar[int]
    ACT_DIM_FIELD_NUMBER: _ClassVar[int]
    JOINT_NAMES_FIELD_NUMBER: _ClassVar[int]
    MODEL_VERSION_FIELD_NUMBER: _ClassVar[int]
    robot_id: str
    spec_fingerprint: str
    obs_dim: int
    act_dim: int
    joint_names: _containers.RepeatedScalarFieldContainer[str]
    model_version: int
    def __init__(self, robot_id: _Optional[str] = ..., spec_fingerprint: _Optional[str] = ..., obs_dim: _Optional[int] = ..., act_dim: _Optional[int] = ..., joint_names: _Optional[_Iterable[str]] = ..., model_version: _Optional[int] = ...) -> None: ...

class StepData(_message.Message):
    __slots__ = ("observation", "reward", "terminated", "truncated", "episode_id", "step_index", "executed_action", "client_timestamp_ns", "deterministic", "watchdog_misses", "success", "task_id", "final_distance_m", "inputs")
    OBSERVATION_FIELD_NUMBER: _ClassVar[int]
    REWARD_FIELD_NUMBER: _ClassVar[int]
    TERMINATED_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    EPISODE_ID_FIELD_NUMBER: _ClassVar[int]
    STEP_INDEX_FIELD_NUMBER: _ClassVar[int]
    EXECUTED_ACTION_FIELD_NUMBER: _ClassVar[int]
    CLIENT_TIMESTAMP_NS_FIELD_NUMBER: _ClassVar[int]
    DETERMINISTIC_FIELD_NUMBER: _ClassVar[int]
    WATCHDOG_MISSES_FIELD_NUMBER: _ClassVar[int]
    SUCCESS_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    FINAL_DISTANCE_M_FIELD_NUMBER: _ClassVar[int]
    INPUTS_FIELD_NUMBER: _ClassVar[int]
    observation: _containers.RepeatedScalarFieldContainer[float]
    reward: float
    terminated: bool
    truncated: bool
    episode_id: str
    step_index: int
    executed_action: _containers.RepeatedScalarFieldContainer[float]
    client_timestamp_ns: int
    deterministic: bool
    watchdog_misses: int
    success: bool
    task_id: str
    final_distance_m: float
    inputs: _containers.RepeatedCompositeFieldContainer[InputTensor]
    def __init__(self, observation: _Optional[_Iterable[float]] = ..., reward: _Optional[float] = ..., terminated: _Optional[bool] = ..., truncated: _Optional[bool] = ..., episode_id: _Optional[str] = ..., step_index: _Optional[int] = ..., executed_action: _Optional[_Iterable[float]] = ..., client_timestamp_ns: _Optional[int] = ..., deterministic: _Optional[bool] = ..., watchdog_misses: _Optional[int] = ..., success: _Optional[bool] = ..., task_id: _Optional[str] = ..., final_distance_m: _Optional[float] = ..., inputs: _Optional[_Iterable[_Union[InputTensor, _Mapping]]] = ...) -> None: ...

class ControlStep(_message.Message):
    __slots__ = ("open", "step")
    OPEN_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    open: SessionOpen
    step: StepData
    def __init__(self, open: _Optional[_Union[SessionOpen, _Mapping]] = ..., step: _Optional[_Union[StepData, _Mapping]] = ...) -> None: ...

class SessionOpened(_message.Message):
    __slots__ = ("session_id", "version", "degradation")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    DEGRADATION_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    version: PolicyVersion
    degradation: DegradationLevel
    def __init__(self, session_id: _Optional[str] = ..., version: _Optional[_Union[PolicyVersion, _Mapping]] = ..., degradation: _Optional[_Union[DegradationLevel, str]] = ...) -> None: ...

class StepError(_message.Message):
    __slots__ = ("code", "message")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    code: int
    message: str
    def __init__(self, code: _Optional[int] = ..., message: _Optional[str] = ...) -> None: ...

class ControlReply(_message.Message):
    __slots__ = ("step_index", "episode_id", "opened", "action", "error")
    STEP_INDEX_FIELD_NUMBER: _ClassVar[int]
    EPISODE_ID_FIELD_NUMBER: _ClassVar[int]
    OPENED_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    step_index: int
    episode_id: str
    opened: SessionOpened
    action: ActionResponse
    error: StepError
    def __init__(self, step_index: _Optional[int] = ..., episode_id: _Optional[str] = ..., opened: _Optional[_Union[SessionOpened, _Mapping]] = ..., action: _Optional[_Union[ActionResponse, _Mapping]] = ..., error: _Optional[_Union[StepError, _Mapping]] = ...) -> None: ...

class DescribeRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class RobotSpecInfo(_message.Message):
    __slots__ = ("name", "fingerprint", "obs_dim", "act_dim", "observation_names", "action_names", "joint_names", "control_period_s", "spec_json")
    NAME_FIELD_NUMBER: _ClassVar[int]
    FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    OBS_DIM_FIELD_NUMBER: _ClassVar[int]
    ACT_DIM_FIELD_NUMBER: _ClassVar[int]
    OBSERVATION_NAMES_FIELD_NUMBER: _ClassVar[int]
    ACTION_NAMES_FIELD_NUMBER: _ClassVar[int]
    JOINT_NAMES_FIELD_NUMBER: _ClassVar[int]
    CONTROL_PERIOD_S_FIELD_NUMBER: _ClassVar[int]
    SPEC_JSON_FIELD_NUMBER: _ClassVar[int]
    name: str
    fingerprint: str
    obs_dim: int
    act_dim: int
    observation_names: _containers.RepeatedScalarFieldContainer[str]
    action_names: _containers.RepeatedScalarFieldContainer[str]
    joint_names: _containers.RepeatedScalarFieldContainer[str]
    control_period_s: float
    spec_json: str
    def __init__(self, name: _Optional[str] = ..., fingerprint: _Optional[str] = ..., obs_dim: _Optional[int] = ..., act_dim: _Optional[int] = ..., observation_names: _Optional[_Iterable[str]] = ..., action_names: _Optional[_Iterable[str]] = ..., joint_names: _Optional[_Iterable[str]] = ..., control_period_s: _Optional[float] = ..., spec_json: _Optional[str] = ...) -> None: ...

class ServerLimits(_message.Message):
    __slots__ = ("max_batch_size", "batch_timeout_s", "max_queued_requests", "rate_limit_hz", "rate_burst", "max_abs_observation", "max_message_bytes")
    MAX_BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    BATCH_TIMEOUT_S_FIELD_NUMBER: _ClassVar[int]
    MAX_QUEUED_REQUESTS_FIELD_NUMBER: _ClassVar[int]
    RATE_LIMIT_HZ_FIELD_NUMBER: _ClassVar[int]
    RATE_BURST_FIELD_NUMBER: _ClassVar[int]
    MAX_ABS_OBSERVATION_FIELD_NUMBER: _ClassVar[int]
    MAX_MESSAGE_BYTES_FIELD_NUMBER: _ClassVar[int]
    max_batch_size: int
    batch_timeout_s: float
    max_queued_requests: int
    rate_limit_hz: float
    rate_burst: float
    max_abs_observation: float
    max_message_bytes: int
    def __init__(self, max_batch_size: _Optional[int] = ..., batch_timeout_s: _Optional[float] = ..., max_queued_requests: _Optional[int] = ..., rate_limit_hz: _Optional[float] = ..., rate_burst: _Optional[float] = ..., max_abs_observation: _Optional[float] = ..., max_message_bytes: _Optional[int] = ...) -> None: ...

class DescribeResponse(_message.Message):
    __slots__ = ("status", "spec", "version", "action_low", "action_high", "limits", "degradation", "safety_limits_json", "inputs", "action_horizon", "supervision_json")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    ACTION_LOW_FIELD_NUMBER: _ClassVar[int]
    ACTION_HIGH_FIELD_NUMBER: _ClassVar[int]
    LIMITS_FIELD_NUMBER: _ClassVar[int]
    DEGRADATION_FIELD_NUMBER: _ClassVar[int]
    SAFETY_LIMITS_JSON_FIELD_NUMBER: _ClassVar[int]
    INPUTS_FIELD_NUMBER: _ClassVar[int]
    ACTION_HORIZON_FIELD_NUMBER: _ClassVar[int]
    SUPERVISION_JSON_FIELD_NUMBER: _ClassVar[int]
    status: str
    spec: RobotSpecInfo
    version: PolicyVersion
    action_low: _containers.RepeatedScalarFieldContainer[float]
    action_high: _containers.RepeatedScalarFieldContainer[float]
    limits: ServerLimits
    degradation: DegradationLevel
    safety_limits_json: str
    inputs: _containers.RepeatedCompositeFieldContainer[InputDescription]
    action_horizon: int
    supervision_json: str
    def __init__(self, status: _Optional[str] = ..., spec: _Optional[_Union[RobotSpecInfo, _Mapping]] = ..., version: _Optional[_Union[PolicyVersion, _Mapping]] = ..., action_low: _Optional[_Iterable[float]] = ..., action_high: _Optional[_Iterable[float]] = ..., limits: _Optional[_Union[ServerLimits, _Mapping]] = ..., degradation: _Optional[_Union[DegradationLevel, str]] = ..., safety_limits_json: _Optional[str] = ..., inputs: _Optional[_Iterable[_Union[InputDescription, _Mapping]]] = ..., action_horizon: _Optional[int] = ..., supervision_json: _Optional[str] = ...) -> None: ...

class InputDescription(_message.Message):
    __slots__ = ("name", "dtype", "shape")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    name: str
    dtype: str
    shape: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, name: _Optional[str] = ..., dtype: _Optional[str] = ..., shape: _Optional[_Iterable[int]] = ...) -> None: ...
