"""gpuctl job documents (version v0.1): strict models for the four kinds.

Unknown keys are refused (the public gpuctl silently drops them), every error
names the dotted path of the field, and numbers are not coerced from strings.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from gpuplane_core.errors import InvalidSpec

Kind = Literal["training", "inference", "notebook", "compute"]
KINDS: tuple[str, ...] = ("training", "inference", "notebook", "compute")
Priority = Literal["high", "medium", "low"]
QoS = Literal["low", "medium", "high", "critical"]

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")
_QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(m|k|M|G|T|P|Ki|Mi|Gi|Ti|Pi)?$")
NOTEBOOK_PORT = 8888
_M = TypeVar("_M", bound=BaseModel)


def _dns_label(value: str, what: str) -> str:
    if len(value) > 63 or not _DNS_LABEL.match(value):
        raise ValueError(f"{what} must be a DNS-1123 label (lowercase letters, digits, '-', at most 63)")
    return value


def _quantity(value: int | float | str) -> str:
    """A Kubernetes quantity as its string form; booleans and negatives are refused."""
    if isinstance(value, bool):
        raise ValueError("must be a quantity such as 4, 500m or 16Gi")
    text = str(value) if not isinstance(value, float) else repr(value)
    if not _QUANTITY.match(text) or float(re.sub(r"[^0-9.]", "", text) or 0) <= 0:
        raise ValueError("must be a positive quantity such as 4, 500m or 16Gi")
    return text


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, populate_by_name=False, frozen=True)


class JobMeta(_Strict):
    name: str
    namespace: str = "default"
    description: Annotated[str, Field(max_length=1024)] | None = None
    priority: Priority = "medium"

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        return _dns_label(v, "job name")

    @field_validator("namespace")
    @classmethod
    def _namespace(cls, v: str) -> str:
        return _dns_label(v, "namespace")


class EnvVar(_Strict):
    name: str
    value: str = ""

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not _ENV_NAME.match(v):
            raise ValueError("must be a valid environment variable name")
        return v

    @field_validator("value", mode="before")
    @classmethod
    def _scalar(cls, v: Any) -> Any:
        # YAML turns `value: 8` into an int; env values are strings in Kubernetes.
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, int | float):
            return str(v)
        return v


class Environment(_Strict):
    image: Annotated[str, Field(min_length=1, max_length=512)]
    imagePullSecret: str | None = None
    command: list[str] = []
    args: list[str] = []
    env: list[EnvVar] = []

    @field_validator("imagePullSecret")
    @classmethod
    def _secret(cls, v: str | None) -> str | None:
        if v is not None and (len(v) > 253 or not re.match(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$", v)):
            raise ValueError("must be a Secret name")
        return v

    @model_validator(mode="after")
    def _unique_env(self) -> Environment:
        names = [e.name for e in self.env]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"env: duplicate names {', '.join(dupes)}")
        return self


class GpuShare(_Strict):
    """A fractional GPU, scheduled by the controller (TensorFusion annotations)."""

    tflops: str | int | float | None = None
    vram: str | None = None
    percent: Annotated[int, Field(ge=1, le=100)] | None = None
    count: Annotated[int, Field(ge=1, le=16)] = 1
    qos: QoS | None = None

    @field_validator("tflops", "vram", mode="before")
    @classmethod
    def _qty(cls, v: Any) -> Any:
        return None if v is None else _quantity(v)

    @model_validator(mode="after")
    def _one_form(self) -> GpuShare:
        if self.percent is not None and self.tflops is not None:
            raise ValueError("give either tflops or percent, not both")
        if self.percent is None and self.tflops is None:
            raise ValueError("give tflops (with vram) or percent")
        if self.tflops is not None and self.vram is None:
            raise ValueError("vram is required with tflops")
        return self


class Resources(_Strict):
    pool: str | None = None
    gpu: Annotated[int, Field(ge=0, le=64)] = 0
    gpuType: str | None = None
    gpuShare: GpuShare | None = None
    cpu: str | int | float
    memory: str

    @field_validator("cpu", "memory", mode="before")
    @classmethod
    def _qty(cls, v: Any) -> Any:
        return _quantity(v)

    @field_validator("pool", "gpuType")
    @classmethod
    def _label_value(cls, v: str | None) -> str | None:
        if v is not None and (not v or len(v) > 63 or not _LABEL_VALUE.match(v)):
            raise ValueError("must be a valid label value (letters, digits, '-', '_', '.', at most 63)")
        return v

    @model_validator(mode="after")
    def _gpu_or_share(self) -> Resources:
        if self.gpuShare is not None and self.gpu:
            raise ValueError("gpu and gpuShare are exclusive: a fractional job sets only gpuShare")
        return self


class Workdir(_Strict):
    path: str

    @field_validator("path")
    @classmethod
    def _abs(cls, v: str) -> str:
        if not v.startswith("/") or ".." in v.split("/") or len(v) > 1024:
            raise ValueError("must be an absolute path without '..'")
        return v


class Storage(_Strict):
    workdirs: Annotated[list[Workdir], Field(max_length=32)] = []

    @model_validator(mode="after")
    def _unique(self) -> Storage:
        paths = [w.path for w in self.workdirs]
        if len(set(paths)) != len(paths):
            raise ValueError("workdirs: duplicate paths")
        return self


class Service(_Strict):
    replicas: Annotated[int, Field(ge=1, le=1000)] = 1
    port: Annotated[int, Field(ge=1, le=65535)] | None = None
    healthCheck: str | None = None

    @field_validator("healthCheck")
    @classmethod
    def _path(cls, v: str | None) -> str | None:
        if v is not None and not v.startswith("/"):
            raise ValueError("must be an HTTP path starting with '/'")
        return v


class Model(_Strict):
    """Which model an inference job serves (informational; kept for yaml_content)."""

    name: str | None = None
    path: str | None = None
    format: str | None = None


class JobSpec(_Strict):
    kind: Kind
    version: Literal["v0.1"]
    job: JobMeta
    environment: Environment
    resources: Resources
    storage: Storage = Storage()
    service: Service | None = None
    model: Model | None = None

    @model_validator(mode="after")
    def _per_kind(self) -> JobSpec:
        if self.model is not None and self.kind != "inference":
            raise ValueError("model: only inference jobs take a model")
        if self.kind == "training" and self.service is not None:
            raise ValueError("service: training jobs have no service (use kind inference or compute)")
        if self.kind in ("inference", "compute") and (self.service is None or self.service.port is None):
            raise ValueError(f"service.port: required for {self.kind} jobs (exposed as a NodePort)")
        if self.kind == "notebook" and self.service is not None and self.service.replicas != 1:
            raise ValueError("service.replicas: a notebook has exactly 1 replica")
        return self

    @property
    def port(self) -> int | None:
        if self.kind == "notebook":
            return (self.service.port if self.service else None) or NOTEBOOK_PORT
        return self.service.port if self.service else None

    @property
    def replicas(self) -> int:
        return self.service.replicas if self.service else 1

    @property
    def needs_gpu(self) -> bool:
        return self.resources.gpu > 0 or self.resources.gpuShare is not None


def _path(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif str(part).startswith(("function-", "constrained-str", "str", "int", "float")) and out:
            continue  # union-branch markers pydantic puts in locations
        else:
            out += f".{part}" if out else str(part)
    return out or "(document)"


def _describe(err: Any) -> tuple[str, str]:
    loc = tuple(err.get("loc", ()))
    kind = err.get("type", "")
    if kind == "extra_forbidden":
        path = _path(loc)
        return f"unknown key '{loc[-1]}' at {path}", path
    path = _path(loc)
    msg = str(err.get("msg", "invalid")).removeprefix("Value error, ")
    if kind == "missing":
        msg = "required field is missing"
    return f"{path}: {msg}", path


def parse_spec(data: dict[str, Any]) -> JobSpec:
    """Validate a loaded document; the InvalidSpec names every offending field (first one as `field`)."""
    return validate_document(JobSpec, data)


def validate_document(model: type[_M], data: dict[str, Any]) -> _M:
    """`model.model_validate(data)` with errors as one InvalidSpec naming each offending field path."""
    try:
        return model.model_validate(data)
    except ValidationError as e:
        described = [_describe(err) for err in e.errors(include_url=False, include_input=False)]
        # A union error reports once per branch; keep the first message per path.
        seen: dict[str, str] = {}
        for msg, path in described:
            seen.setdefault(path, msg)
        msgs = list(seen.values())
        text = "; ".join(msgs[:5]) + (f"; and {len(msgs) - 5} more" if len(msgs) > 5 else "")
        raise InvalidSpec(text, field=next(iter(seen))) from None
