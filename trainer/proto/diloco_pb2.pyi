from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class TensorSpec(_message.Message):
    __slots__ = ("name", "shape", "dtype")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    name: str
    shape: _containers.RepeatedScalarFieldContainer[int]
    dtype: str
    def __init__(self, name: _Optional[str] = ..., shape: _Optional[_Iterable[int]] = ..., dtype: _Optional[str] = ...) -> None: ...

class FragmentLayout(_message.Message):
    __slots__ = ("fragment", "tensors")
    FRAGMENT_FIELD_NUMBER: _ClassVar[int]
    TENSORS_FIELD_NUMBER: _ClassVar[int]
    fragment: int
    tensors: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, fragment: _Optional[int] = ..., tensors: _Optional[_Iterable[str]] = ...) -> None: ...

class JoinRequest(_message.Message):
    __slots__ = ("learner_id", "incarnation", "config_hash")
    LEARNER_ID_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    CONFIG_HASH_FIELD_NUMBER: _ClassVar[int]
    learner_id: str
    incarnation: str
    config_hash: str
    def __init__(self, learner_id: _Optional[str] = ..., incarnation: _Optional[str] = ..., config_hash: _Optional[str] = ...) -> None: ...

class JoinReply(_message.Message):
    __slots__ = ("ok", "reason", "detail", "incarnation_index", "syncer_incarnation", "versions", "fragments", "progress", "cluster_step", "step_pace_s")
    OK_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_INDEX_FIELD_NUMBER: _ClassVar[int]
    SYNCER_INCARNATION_FIELD_NUMBER: _ClassVar[int]
    VERSIONS_FIELD_NUMBER: _ClassVar[int]
    FRAGMENTS_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_STEP_FIELD_NUMBER: _ClassVar[int]
    STEP_PACE_S_FIELD_NUMBER: _ClassVar[int]
    ok: bool
    reason: str
    detail: str
    incarnation_index: int
    syncer_incarnation: str
    versions: _containers.RepeatedScalarFieldContainer[int]
    fragments: _containers.RepeatedCompositeFieldContainer[FragmentLayout]
    progress: float
    cluster_step: float
    step_pace_s: float
    def __init__(self, ok: _Optional[bool] = ..., reason: _Optional[str] = ..., detail: _Optional[str] = ..., incarnation_index: _Optional[int] = ..., syncer_incarnation: _Optional[str] = ..., versions: _Optional[_Iterable[int]] = ..., fragments: _Optional[_Iterable[_Union[FragmentLayout, _Mapping]]] = ..., progress: _Optional[float] = ..., cluster_step: _Optional[float] = ..., step_pace_s: _Optional[float] = ...) -> None: ...

class LeaveRequest(_message.Message):
    __slots__ = ("learner_id", "incarnation", "why")
    LEARNER_ID_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    WHY_FIELD_NUMBER: _ClassVar[int]
    learner_id: str
    incarnation: str
    why: str
    def __init__(self, learner_id: _Optional[str] = ..., incarnation: _Optional[str] = ..., why: _Optional[str] = ...) -> None: ...

class LeaveReply(_message.Message):
    __slots__ = ("ok", "reason", "detail")
    OK_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    ok: bool
    reason: str
    detail: str
    def __init__(self, ok: _Optional[bool] = ..., reason: _Optional[str] = ..., detail: _Optional[str] = ...) -> None: ...

class FragmentCounters(_message.Message):
    __slots__ = ("fragment", "steps", "tokens")
    FRAGMENT_FIELD_NUMBER: _ClassVar[int]
    STEPS_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    fragment: int
    steps: int
    tokens: int
    def __init__(self, fragment: _Optional[int] = ..., steps: _Optional[int] = ..., tokens: _Optional[int] = ...) -> None: ...

class ReportRequest(_message.Message):
    __slots__ = ("learner_id", "incarnation", "step", "tokens", "step_time_s", "loss", "counters")
    LEARNER_ID_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    STEP_TIME_S_FIELD_NUMBER: _ClassVar[int]
    LOSS_FIELD_NUMBER: _ClassVar[int]
    COUNTERS_FIELD_NUMBER: _ClassVar[int]
    learner_id: str
    incarnation: str
    step: int
    tokens: int
    step_time_s: float
    loss: float
    counters: _containers.RepeatedCompositeFieldContainer[FragmentCounters]
    def __init__(self, learner_id: _Optional[str] = ..., incarnation: _Optional[str] = ..., step: _Optional[int] = ..., tokens: _Optional[int] = ..., step_time_s: _Optional[float] = ..., loss: _Optional[float] = ..., counters: _Optional[_Iterable[_Union[FragmentCounters, _Mapping]]] = ...) -> None: ...

class ReportReply(_message.Message):
    __slots__ = ("ok", "reason", "detail", "stop", "syncer_incarnation", "versions", "progress", "cluster_step", "step_pace_s")
    OK_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    STOP_FIELD_NUMBER: _ClassVar[int]
    SYNCER_INCARNATION_FIELD_NUMBER: _ClassVar[int]
    VERSIONS_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_STEP_FIELD_NUMBER: _ClassVar[int]
    STEP_PACE_S_FIELD_NUMBER: _ClassVar[int]
    ok: bool
    reason: str
    detail: str
    stop: bool
    syncer_incarnation: str
    versions: _containers.RepeatedScalarFieldContainer[int]
    progress: float
    cluster_step: float
    step_pace_s: float
    def __init__(self, ok: _Optional[bool] = ..., reason: _Optional[str] = ..., detail: _Optional[str] = ..., stop: _Optional[bool] = ..., syncer_incarnation: _Optional[str] = ..., versions: _Optional[_Iterable[int]] = ..., progress: _Optional[float] = ..., cluster_step: _Optional[float] = ..., step_pace_s: _Optional[float] = ...) -> None: ...

class DataChunk(_message.Message):
    __slots__ = ("offset", "data")
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    offset: int
    data: bytes
    def __init__(self, offset: _Optional[int] = ..., data: _Optional[bytes] = ...) -> None: ...

class UploadHeader(_message.Message):
    __slots__ = ("learner_id", "incarnation", "fragment", "base_version", "c_steps", "c_tokens", "tensors", "total_bytes", "crc32", "learner_step", "round")
    LEARNER_ID_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    FRAGMENT_FIELD_NUMBER: _ClassVar[int]
    BASE_VERSION_FIELD_NUMBER: _ClassVar[int]
    C_STEPS_FIELD_NUMBER: _ClassVar[int]
    C_TOKENS_FIELD_NUMBER: _ClassVar[int]
    TENSORS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    CRC32_FIELD_NUMBER: _ClassVar[int]
    LEARNER_STEP_FIELD_NUMBER: _ClassVar[int]
    ROUND_FIELD_NUMBER: _ClassVar[int]
    learner_id: str
    incarnation: str
    fragment: int
    base_version: int
    c_steps: int
    c_tokens: int
    tensors: _containers.RepeatedCompositeFieldContainer[TensorSpec]
    total_bytes: int
    crc32: int
    learner_step: int
    round: int
    def __init__(self, learner_id: _Optional[str] = ..., incarnation: _Optional[str] = ..., fragment: _Optional[int] = ..., base_version: _Optional[int] = ..., c_steps: _Optional[int] = ..., c_tokens: _Optional[int] = ..., tensors: _Optional[_Iterable[_Union[TensorSpec, _Mapping]]] = ..., total_bytes: _Optional[int] = ..., crc32: _Optional[int] = ..., learner_step: _Optional[int] = ..., round: _Optional[int] = ...) -> None: ...

class UploadChunk(_message.Message):
    __slots__ = ("header", "data")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    header: UploadHeader
    data: DataChunk
    def __init__(self, header: _Optional[_Union[UploadHeader, _Mapping]] = ..., data: _Optional[_Union[DataChunk, _Mapping]] = ...) -> None: ...

class UploadReply(_message.Message):
    __slots__ = ("accepted", "reason", "detail", "current_version", "duplicate", "cluster_step", "step_pace_s", "late", "header_step")
    ACCEPTED_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    CURRENT_VERSION_FIELD_NUMBER: _ClassVar[int]
    DUPLICATE_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_STEP_FIELD_NUMBER: _ClassVar[int]
    STEP_PACE_S_FIELD_NUMBER: _ClassVar[int]
    LATE_FIELD_NUMBER: _ClassVar[int]
    HEADER_STEP_FIELD_NUMBER: _ClassVar[int]
    accepted: bool
    reason: str
    detail: str
    current_version: int
    duplicate: bool
    cluster_step: float
    step_pace_s: float
    late: bool
    header_step: float
    def __init__(self, accepted: _Optional[bool] = ..., reason: _Optional[str] = ..., detail: _Optional[str] = ..., current_version: _Optional[int] = ..., duplicate: _Optional[bool] = ..., cluster_step: _Optional[float] = ..., step_pace_s: _Optional[float] = ..., late: _Optional[bool] = ..., header_step: _Optional[float] = ...) -> None: ...

class FragmentRequest(_message.Message):
    __slots__ = ("learner_id", "fragment", "min_version", "wait_s")
    LEARNER_ID_FIELD_NUMBER: _ClassVar[int]
    FRAGMENT_FIELD_NUMBER: _ClassVar[int]
    MIN_VERSION_FIELD_NUMBER: _ClassVar[int]
    WAIT_S_FIELD_NUMBER: _ClassVar[int]
    learner_id: str
    fragment: int
    min_version: int
    wait_s: float
    def __init__(self, learner_id: _Optional[str] = ..., fragment: _Optional[int] = ..., min_version: _Optional[int] = ..., wait_s: _Optional[float] = ...) -> None: ...

class FragmentHeader(_message.Message):
    __slots__ = ("fragment", "version", "tensors", "total_bytes", "crc32")
    FRAGMENT_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    TENSORS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    CRC32_FIELD_NUMBER: _ClassVar[int]
    fragment: int
    version: int
    tensors: _containers.RepeatedCompositeFieldContainer[TensorSpec]
    total_bytes: int
    crc32: int
    def __init__(self, fragment: _Optional[int] = ..., version: _Optional[int] = ..., tensors: _Optional[_Iterable[_Union[TensorSpec, _Mapping]]] = ..., total_bytes: _Optional[int] = ..., crc32: _Optional[int] = ...) -> None: ...

class FragmentChunk(_message.Message):
    __slots__ = ("header", "data")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    header: FragmentHeader
    data: DataChunk
    def __init__(self, header: _Optional[_Union[FragmentHeader, _Mapping]] = ..., data: _Optional[_Union[DataChunk, _Mapping]] = ...) -> None: ...

class StateRequest(_message.Message):
    __slots__ = ("learner_id",)
    LEARNER_ID_FIELD_NUMBER: _ClassVar[int]
    learner_id: str
    def __init__(self, learner_id: _Optional[str] = ...) -> None: ...

class StatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class LearnerStatus(_message.Message):
    __slots__ = ("learner_id", "incarnation", "incarnation_index", "active", "step", "tokens", "last_seen_age_s", "merged_contributions")
    LEARNER_ID_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_INDEX_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    LAST_SEEN_AGE_S_FIELD_NUMBER: _ClassVar[int]
    MERGED_CONTRIBUTIONS_FIELD_NUMBER: _ClassVar[int]
    learner_id: str
    incarnation: str
    incarnation_index: int
    active: bool
    step: int
    tokens: int
    last_seen_age_s: float
    merged_contributions: int
    def __init__(self, learner_id: _Optional[str] = ..., incarnation: _Optional[str] = ..., incarnation_index: _Optional[int] = ..., active: _Optional[bool] = ..., step: _Optional[int] = ..., tokens: _Optional[int] = ..., last_seen_age_s: _Optional[float] = ..., merged_contributions: _Optional[int] = ...) -> None: ...

class StatusReply(_message.Message):
    __slots__ = ("syncer_incarnation", "mode", "versions", "merges", "tokens", "token_budget", "finished", "learners", "last_merge_unix", "eval_loss", "eval_merges", "loss_floor", "rejections", "restored_from_merges", "cluster_step", "step_pace_s", "late_carried")
    class RejectionsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    SYNCER_INCARNATION_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    VERSIONS_FIELD_NUMBER: _ClassVar[int]
    MERGES_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    TOKEN_BUDGET_FIELD_NUMBER: _ClassVar[int]
    FINISHED_FIELD_NUMBER: _ClassVar[int]
    LEARNERS_FIELD_NUMBER: _ClassVar[int]
    LAST_MERGE_UNIX_FIELD_NUMBER: _ClassVar[int]
    EVAL_LOSS_FIELD_NUMBER: _ClassVar[int]
    EVAL_MERGES_FIELD_NUMBER: _ClassVar[int]
    LOSS_FLOOR_FIELD_NUMBER: _ClassVar[int]
    REJECTIONS_FIELD_NUMBER: _ClassVar[int]
    RESTORED_FROM_MERGES_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_STEP_FIELD_NUMBER: _ClassVar[int]
    STEP_PACE_S_FIELD_NUMBER: _ClassVar[int]
    LATE_CARRIED_FIELD_NUMBER: _ClassVar[int]
    syncer_incarnation: str
    mode: str
    versions: _containers.RepeatedScalarFieldContainer[int]
    merges: int
    tokens: int
    token_budget: int
    finished: bool
    learners: _containers.RepeatedCompositeFieldContainer[LearnerStatus]
    last_merge_unix: _containers.RepeatedScalarFieldContainer[float]
    eval_loss: float
    eval_merges: int
    loss_floor: float
    rejections: _containers.ScalarMap[str, int]
    restored_from_merges: int
    cluster_step: float
    step_pace_s: float
    late_carried: int
    def __init__(self, syncer_incarnation: _Optional[str] = ..., mode: _Optional[str] = ..., versions: _Optional[_Iterable[int]] = ..., merges: _Optional[int] = ..., tokens: _Optional[int] = ..., token_budget: _Optional[int] = ..., finished: _Optional[bool] = ..., learners: _Optional[_Iterable[_Union[LearnerStatus, _Mapping]]] = ..., last_merge_unix: _Optional[_Iterable[float]] = ..., eval_loss: _Optional[float] = ..., eval_merges: _Optional[int] = ..., loss_floor: _Optional[float] = ..., rejections: _Optional[_Mapping[str, int]] = ..., restored_from_merges: _Optional[int] = ..., cluster_step: _Optional[float] = ..., step_pace_s: _Optional[float] = ..., late_carried: _Optional[int] = ...) -> None: ...
