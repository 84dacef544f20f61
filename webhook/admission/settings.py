"""AdmissionSettings: everything the webhook needs, built from defaults <- YAML config file <- flags.

The config file's rule keys (resources, isolation, schedulerName, excludedNamespaces) are also what
`gpushare check --config` reads, through `load_config`/`policy_from_config`; this module imports no
server framework so that stays fast.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import yaml

from webhook.core.admission import claims, verdict
from webhook.core.specs import gpumem
from webhook.core.wire import quantity, resources
from webhook.core.wire.units import memory_unit

DEFAULT_MAX_BODY_BYTES = 3 * 1024 * 1024
LOG_LEVELS = ("debug", "info", "warning", "error")
LOG_FORMATS = ("json", "text")
ISOLATION_VALUES = ("true", "false")


class ConfigError(ValueError):
    """A config file or flag value we cannot use; the message names the file, key and what is allowed."""


@dataclass(frozen=True, slots=True)
class AdmissionSettings:
    host: str = "0.0.0.0"
    port: int = 8443
    cert_dir: Path = Path("certs")
    cert: Path | None = None  # with `key`: serve these files instead of cert_dir/tls.crt, tls.key
    key: Path | None = None
    service_dns: tuple[str, ...] = ()  # extra SANs when a certificate is generated into cert_dir
    policy: verdict.Policy = field(default_factory=verdict.Policy)
    excluded_namespaces: frozenset[str] = frozenset()
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    log_level: str = "info"
    log_format: str = "json"
    cert_reload_interval_s: float = 1.0

    def __post_init__(self) -> None:
        if not 0 <= self.port <= 65535:
            raise ConfigError(f"port must be 0-65535, got {self.port}")
        if (self.cert is None) != (self.key is None):
            raise ConfigError("cert and key go together: give both or neither")
        if self.max_body_bytes < 1024:
            raise ConfigError(f"maxBodyBytes must be at least 1024, got {self.max_body_bytes}")
        if self.log_level not in LOG_LEVELS:
            raise ConfigError(f"logLevel must be one of {', '.join(LOG_LEVELS)}, got {self.log_level!r}")
        if self.log_format not in LOG_FORMATS:
            raise ConfigError(f"logFormat must be one of {', '.join(LOG_FORMATS)}, got {self.log_format!r}")
        if self.cert_reload_interval_s <= 0:
            raise ConfigError(f"certReloadIntervalSeconds must be > 0, got {self.cert_reload_interval_s}")


# Config file key -> AdmissionSettings field, for the server keys (rule keys are parsed apart).
SERVER_KEYS: dict[str, str] = {
    "host": "host",
    "port": "port",
    "certDir": "cert_dir",
    "cert": "cert",
    "key": "key",
    "serviceDns": "service_dns",
    "maxBodyBytes": "max_body_bytes",
    "logLevel": "log_level",
    "logFormat": "log_format",
    "certReloadIntervalSeconds": "cert_reload_interval_s",
}
RULE_KEYS = (
    "resources",
    "isolation",
    "schedulerName",
    "excludedNamespaces",
    "memoryUnit",
    "minShareMiB",
    "dra",
)
RESOURCE_KEYS = ("wholeDevice", "wholeDevicePrefixes", "memory", "count")
ISOLATION_KEYS = ("labelKey", "annotationKey", "envName", "default")
# The chart's DRA DeviceClasses, the driver's memory step and the largest GPU memory a claim may ask.
DRA_KEYS = ("shareClass", "wholeGpuClass", "memoryStep", "maxMemory")


def load_config(path: Path) -> dict[str, Any]:
    """The config file as a mapping (empty file: {}); ConfigError when unreadable or not a mapping."""
    try:
        text = path.read_bytes().decode("utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"config file {path}: not UTF-8 text (byte {exc.start})") from exc
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        line, column, problem = yaml_problem(exc, text)
        where = f"line {line}, column {column}: " if line is not None else ""
        raise ConfigError(f"config file {path}: {where}{problem}") from exc
    except RecursionError as exc:
        raise ConfigError(f"config file {path}: nested too deeply") from exc
    except ValueError as exc:  # a value YAML parsed but Python refuses, e.g. an integer of 5,000 digits
        raise ConfigError(f"config file {path}: {exc}") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path} must be a mapping of keys, got {type(data).__name__}")
    unknown = sorted(str(k) for k in data if k not in SERVER_KEYS and k not in RULE_KEYS)
    if unknown:
        known = ", ".join([*RULE_KEYS, *SERVER_KEYS])
        raise ConfigError(f"config file {path}: unknown key(s) {', '.join(unknown)}; known: {known}")
    return data


def yaml_problem(exc: yaml.YAMLError, text: str) -> tuple[int | None, int | None, str]:
    """(line, column, problem) of a PyYAML error in `text`: 1-based, None when it names no place; the
    problem on one line, without PyYAML's `in "<unicode string>"` and caret lines."""
    if isinstance(exc, yaml.MarkedYAMLError):
        problem = ": ".join(p for p in (exc.context, exc.problem) if p) or "cannot parse"
        mark = exc.problem_mark or exc.context_mark
        return (mark.line + 1, mark.column + 1, problem) if mark else (None, None, problem)
    if isinstance(exc, yaml.reader.ReaderError):  # a control character: its place is an offset
        start = text.rfind("\n", 0, exc.position) + 1
        return text.count("\n", 0, exc.position) + 1, exc.position - start + 1, str(exc).split("\n", 1)[0]
    return None, None, str(exc).split("\n", 1)[0]


def from_file(path: Path | None, flags: Mapping[str, Any] | None = None) -> AdmissionSettings:
    """Settings from config file `path` (None: defaults) with `flags` (config keys, e.g. "port") replacing
    its keys. ConfigError names the file when the file's own values are at fault, not a flag's."""
    data = load_config(path) if path is not None else {}
    flags = flags or {}
    try:
        return build({**data, **flags})
    except ConfigError as exc:
        # The file is at fault when its values alone (less those the flags replace) fail the same way:
        # `port: 70000` in it is, `--cert` without `--key` is not.
        if path is not None and _problem({k: v for k, v in data.items() if k not in flags}) == str(exc):
            raise in_file(path, exc) from None
        raise


def rules_from_file(path: Path | None) -> tuple[verdict.Policy, frozenset[str]]:
    """The rule policy and excluded namespaces of config file `path` (None: defaults), as `gpushare check`
    reads them; its server keys are not checked. ConfigError names the file."""
    data = load_config(path) if path is not None else {}
    try:
        return policy_from_config(data), excluded_from_config(data)
    except ConfigError as exc:
        if path is None:
            raise
        raise in_file(path, exc) from None


def in_file(path: Path, exc: ConfigError) -> ConfigError:
    """`exc` said of config file `path`."""
    return ConfigError(f"config file {path}: {exc}")


def _problem(data: Mapping[str, Any]) -> str:
    try:
        build(data)
    except ConfigError as exc:
        return str(exc)
    return ""


def policy_from_config(data: Mapping[str, Any]) -> verdict.Policy:
    """The rule policy from a config mapping's `resources`, `isolation` and `schedulerName` keys."""
    res = _section(data, "resources", RESOURCE_KEYS)
    names = resources.GpuResourceNames()
    if "wholeDevice" in res:
        names = replace(names, whole_device=frozenset(_names(res["wholeDevice"], "resources.wholeDevice")))
    if "wholeDevicePrefixes" in res:
        prefixes = tuple(_names(res["wholeDevicePrefixes"], "resources.wholeDevicePrefixes"))
        names = replace(names, whole_device_prefixes=prefixes)
    if "memory" in res:
        names = replace(names, memory=_string(res["memory"], "resources.memory"))
    if "count" in res:
        names = replace(names, count=_string(res["count"], "resources.count"))
    iso = _section(data, "isolation", ISOLATION_KEYS)
    isolation = verdict.IsolationPolicy()
    for key, attr in (
        ("labelKey", "label_key"),
        ("annotationKey", "annotation_key"),
        ("envName", "env_name"),
    ):
        if key in iso:
            isolation = replace(isolation, **{attr: _string(iso[key], f"isolation.{key}")})
    if "default" in iso:
        isolation = replace(isolation, default=isolation_default(iso["default"]))
    scheduler = data.get("schedulerName")
    if scheduler is not None:
        scheduler = _string(scheduler, "schedulerName")
    # The unit the extender and device plugin count gpu-mem in (the chart's gpuMemory.unit): every
    # message names it and suggests values in it.
    unit = gpumem.DEFAULT_UNIT
    if data.get("memoryUnit") is not None:
        unit = _string(data["memoryUnit"], "memoryUnit")
        try:
            memory_unit(unit)
        except ValueError as exc:
            raise ConfigError(f"memoryUnit: {exc}") from None
    return verdict.Policy(
        names=names,
        isolation=isolation,
        scheduler_name=scheduler,
        memory_unit=unit,
        claims=claim_policy(data),
        min_share_mib=_least_share(data.get("minShareMiB")),
    )


def _least_share(value: Any) -> int:
    """`minShareMiB`: shares under it get a warning (a CUDA context may not fit); 0 turns that off."""
    if value is None:
        return gpumem.SMALL_SHARE_MIB
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(
            f"minShareMiB must be a whole number of MiB, 0 or more (0: no warning), got {value!r}"
        )
    return value


def claim_policy(data: Mapping[str, Any]) -> claims.ClaimPolicy:
    """The rules for ResourceClaims from the config's `dra` key (defaults: the chart's class names, 1Gi
    steps, 80Gi at most)."""
    section = _section(data, "dra", DRA_KEYS)
    values: dict[str, Any] = {}
    for key, attr in (("shareClass", "share_class"), ("wholeGpuClass", "whole_class")):
        if key in section:
            values[attr] = _string(section[key], f"dra.{key}")
    for key, attr in (("memoryStep", "step"), ("maxMemory", "max_memory")):
        if key in section:
            values[attr] = _bytes(section[key], f"dra.{key}")
    try:
        return claims.ClaimPolicy(**values)
    except claims.PolicyError as exc:
        raise ConfigError(f"dra: {exc}") from None


def _bytes(value: Any, key: str) -> int:
    """A size such as 1Gi or 80Gi, in whole bytes."""
    try:
        parsed = quantity.from_json(value)
    except quantity.QuantityError as exc:
        raise ConfigError(f"{key} must be a size such as 80Gi: {exc}") from None
    amount = parsed.value
    if amount <= 0 or amount.denominator != 1 or amount % claims.MIB:
        raise ConfigError(f"{key} must be a whole number of MiB above 0, such as 80Gi, got {value!r}")
    return int(amount)


def excluded_from_config(data: Mapping[str, Any]) -> frozenset[str]:
    if "excludedNamespaces" not in data or data["excludedNamespaces"] is None:
        return frozenset()
    return frozenset(_names(data["excludedNamespaces"], "excludedNamespaces"))


def isolation_default(value: Any) -> str:
    # YAML reads an unquoted true/false as a bool; both spellings mean the same label value.
    text = str(value).lower() if isinstance(value, bool | str) else None
    if text not in ISOLATION_VALUES:
        raise ConfigError(f"isolation.default must be true or false, got {value!r}")
    return text


def build(
    config: Mapping[str, Any] | None = None, overrides: Mapping[str, Any] | None = None
) -> AdmissionSettings:
    """Settings from a config mapping (see `load_config`) with `overrides` (AdmissionSettings field
    names, e.g. from flags; None values are ignored) applied on top."""
    data = dict(config or {})
    values: dict[str, Any] = {}
    for key, name in SERVER_KEYS.items():
        if key in data and data[key] is not None:
            values[name] = _server_value(name, data[key], key)
    values["policy"] = policy_from_config(data)
    values["excluded_namespaces"] = excluded_from_config(data)
    known = {f.name for f in fields(AdmissionSettings)}
    for name, value in (overrides or {}).items():
        if name not in known:
            raise ConfigError(f"unknown setting {name!r}")
        if value is not None:
            values[name] = value
    try:
        return AdmissionSettings(**values)
    except TypeError as exc:
        raise ConfigError(str(exc)) from exc


def _server_value(name: str, value: Any, key: str) -> Any:
    if name in ("port", "max_body_bytes"):
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{key} must be an integer, got {value!r}")
        return value
    if name == "cert_reload_interval_s":
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"{key} must be a number of seconds, got {value!r}")
        return float(value)
    if name in ("cert_dir", "cert", "key"):
        return Path(_string(value, key))
    if name == "service_dns":
        return tuple(_names(value, key))
    return _string(value, key)


def _section(data: Mapping[str, Any], key: str, allowed: tuple[str, ...]) -> Mapping[str, Any]:
    section = data.get(key)
    if section is None:
        return {}
    if not isinstance(section, dict):
        raise ConfigError(f"{key} must be a mapping with keys {', '.join(allowed)}, got {section!r}")
    unknown = sorted(str(k) for k in section if k not in allowed)
    if unknown:
        raise ConfigError(f"{key}: unknown key(s) {', '.join(unknown)}; known: {', '.join(allowed)}")
    return section


def _string(value: Any, key: str) -> str:
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{key} must be a non-empty string, got {value!r}")
    return value


def _names(value: Any, key: str) -> list[str]:
    if not isinstance(value, list):
        raise ConfigError(f"{key} must be a list of strings, got {value!r}")
    return [_string(item, f"{key}[{i}]") for i, item in enumerate(value)]
