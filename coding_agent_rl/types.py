"""The training sample, field-compatible with slime's ``Sample``, and the conversions to and
from the caller's own sample class.

Everything handed back to a caller is an object of the caller's class with a ``status`` of its
own ``Status`` enum (:func:`to_caller`); inside the package samples are our :class:`Sample`
(:func:`from_caller`). The invariants :meth:`Sample.check` enforces: docs/modules/core.md.
"""

from __future__ import annotations

import base64
import copy
import dataclasses
import enum
import io
from typing import Any

from coding_agent_rl.errors import FailureKind

SCHEMA_VERSION = 1


class Status(str, enum.Enum):
    PENDING = "pending"
    COMPLETED = "completed"
    TRUNCATED = "truncated"
    ABORTED = "aborted"
    FAILED = "failed"

    def __str__(self) -> str:
        return self.value


@dataclasses.dataclass
class Sample:
    group_index: int | None = None
    index: int | None = None
    rollout_id: int | str | None = None
    prompt: str | list[dict[str, Any]] = ""
    tokens: list[int] = dataclasses.field(default_factory=list)
    response: str = ""
    response_length: int = 0
    label: Any = None
    reward: float | dict[str, Any] | None = None
    loss_mask: list[int] | None = None
    rollout_log_probs: list[float] | None = None
    remove_sample: bool = False
    status: Status = Status.PENDING
    metadata: dict[str, Any] = dataclasses.field(default_factory=dict)
    session_id: str | None = None
    weight_versions: list[str] = dataclasses.field(default_factory=list)
    non_generation_time: float = 0.0
    # slime's multimodal fields: the images in prompt order ({"images": [data URL, ...]})
    # and the processor's tensors for them, merged once (pixel_values, image_grid_thw, ...).
    multimodal_inputs: dict[str, Any] | None = None
    multimodal_train_inputs: dict[str, Any] | None = None

    Status = Status  # slime's shape: ``type(sample).Status.ABORTED`` (not a field)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: tensors of ``multimodal_train_inputs`` as dtype, shape and base64 bytes."""
        from coding_agent_rl.tensors import tensors_to_json

        train, self.multimodal_train_inputs = self.multimodal_train_inputs, None
        try:
            d = dataclasses.asdict(self)
        finally:
            self.multimodal_train_inputs = train
        d["multimodal_train_inputs"] = tensors_to_json(train)
        d["status"] = self.status.value
        d["schema_version"] = SCHEMA_VERSION
        return d

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Sample:
        from coding_agent_rl.tensors import tensors_from_json

        names = {f.name for f in dataclasses.fields(cls)}
        kwargs = {k: v for k, v in data.items() if k in names}
        if "status" in kwargs:
            kwargs["status"] = Status(kwargs["status"])
        if kwargs.get("multimodal_train_inputs") is not None:
            kwargs["multimodal_train_inputs"] = tensors_from_json(kwargs["multimodal_train_inputs"])
        return cls(**kwargs)

    def check(self) -> None:
        """Raise ``ValueError`` naming the first broken invariant."""
        n = self.response_length
        if self.loss_mask is None or self.rollout_log_probs is None:
            raise ValueError("loss_mask and rollout_log_probs must be set")
        if not (len(self.loss_mask) == len(self.rollout_log_probs) == n):
            raise ValueError(
                f"misaligned sample: loss_mask={len(self.loss_mask)} "
                f"rollout_log_probs={len(self.rollout_log_probs)} response_length={n}"
            )
        if n > len(self.tokens):
            raise ValueError(f"response_length {n} exceeds tokens {len(self.tokens)}")
        for m, lp in zip(self.loss_mask, self.rollout_log_probs, strict=True):
            if m not in (0, 1):
                raise ValueError(f"loss_mask holds {m!r}, not 0/1")
            if m == 0 and lp != 0.0:
                raise ValueError("masked token carries a non-zero log prob")


def aborted_sample(
    base: Any, reason: str, failure_kind: FailureKind = "infra", **metadata: Any
) -> Any:
    """The placeholder slime drops from training: one masked token, ``remove_sample=True``,
    status ABORTED; an object of ``base``'s class (ours or the caller's)."""
    if type(base) is not Sample:
        return to_caller(aborted_sample(from_caller(base), reason, failure_kind, **metadata), base)
    meta = dict(base.metadata)
    meta.update(metadata, abort_reason=reason, failure_kind=failure_kind)
    return dataclasses.replace(
        base,
        rollout_id=base.rollout_id if base.rollout_id is not None else base.index,
        tokens=[0, 0],
        response="",
        response_length=1,
        loss_mask=[0],
        rollout_log_probs=[0.0],
        reward=0.0,
        remove_sample=True,
        status=Status.ABORTED,
        metadata=meta,
    )


# ---- the caller's sample class ------------------------------------------------------------------

_NEEDED = ("pending", "completed", "truncated", "aborted")
_FIELDS = tuple(f.name for f in dataclasses.fields(Sample))


def status_enum(cls: type) -> type[enum.Enum]:
    """The enum whose members samples of class ``cls`` must carry: ``cls.Status`` (slime nests a
    plain ``Enum`` there), else our :class:`Status`. Raises ``TypeError`` when ``cls.Status``
    lacks one of the values this package returns."""
    candidate = getattr(cls, "Status", None)
    if not (isinstance(candidate, type) and issubclass(candidate, enum.Enum)):
        return Status
    values = {m.value for m in candidate}
    missing = [v for v in _NEEDED if v not in values]
    if missing:
        raise TypeError(f"{cls.__qualname__}.Status has no member with the value(s) {missing}")
    return candidate


def as_status(status: Any, enum_cls: type[enum.Enum]) -> enum.Enum:
    """``status`` (a member of any Status enum, or its string value) as a member of ``enum_cls``."""
    value = status.value if isinstance(status, enum.Enum) else status
    return enum_cls(value)


def from_caller(sample: Any) -> Sample:
    """Our :class:`Sample` with the caller's values (by field name; status by value). Lists and
    ``metadata`` are copied: nothing done here changes the caller's object."""
    values = {name: getattr(sample, name) for name in _FIELDS if hasattr(sample, name)}
    values["status"] = as_status(values.get("status", Status.PENDING), Status)
    values["metadata"] = dict(values.get("metadata") or {})
    values["weight_versions"] = list(values.get("weight_versions") or [])
    values["tokens"] = list(values.get("tokens") or [])
    return Sample(**values)


def _reward_value(reward: Any) -> Any:
    if isinstance(reward, bool) or not isinstance(reward, (int, float)):
        return reward  # None, or a dict of named rewards: the caller's reward model decides
    return float(reward)


def to_caller(sample: Sample, template: Any) -> Any:
    """``sample`` as an object of ``template``'s class: our fields set by name, ``status`` a member
    of that class's ``Status``, ``remove_sample`` a ``bool``, a numeric ``reward`` a ``float``.
    Fields only the caller's class has (e.g. slime's ``multimodal_train_inputs``,
    ``train_metadata``) keep the template's values; our fields its class lacks are set as
    attributes (slime's own ``Sample.from_dict`` does the same with unknown keys)."""
    cls = type(template)
    if not dataclasses.is_dataclass(cls):
        raise TypeError(f"the sample class {cls.__qualname__} is not a dataclass")
    values = {name: getattr(sample, name) for name in _FIELDS}
    values["status"] = as_status(sample.status, status_enum(cls))
    values["remove_sample"] = bool(sample.remove_sample)
    values["reward"] = _reward_value(sample.reward)
    init = {f.name for f in dataclasses.fields(cls) if f.init}
    if cls is not Sample:
        values["multimodal_inputs"] = _pil_images(values.get("multimodal_inputs"))
        # the caller's own mutable fields (slime: spec_info, prefix_cache_info, ...): one copy
        # per object handed back, so siblings never share them
        for name in init - set(values):
            value = getattr(template, name)
            if isinstance(value, (dict, list, set)) or dataclasses.is_dataclass(value):
                values[name] = copy.copy(value)
    out = dataclasses.replace(template, **{k: v for k, v in values.items() if k in init})
    for name, value in values.items():
        if name not in init:
            setattr(out, name, value)
    return out


def _pil_images(inputs: Any) -> Any:
    """``multimodal_inputs`` with data-URL images as PIL images, where the caller keeps them so
    (slime's engine encoder reads ``image.mode``); unchanged without PIL."""
    if not isinstance(inputs, dict) or not inputs.get("images"):
        return inputs
    try:
        from PIL import Image
    except ImportError:
        return inputs

    def pil(image: Any) -> Any:
        if not (isinstance(image, str) and image.startswith("data:") and "," in image):
            return image  # already an image object (or not one of ours): as it is
        # bounded when it entered the rollout (multimodal/pictures.py): decode as it was checked
        opened = Image.open(io.BytesIO(base64.b64decode(image.split(",", 1)[1])))
        opened.load()
        return opened

    return {**inputs, "images": [pil(i) for i in inputs["images"]]}
