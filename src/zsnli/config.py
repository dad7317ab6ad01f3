"""Server settings: every limit is an environment variable with a default.

All variables are prefixed ``ZSNLI_`` (``HOST``/``PORT`` are read by
``server.py``/``serve.sh`` only). ``Settings.from_env()`` parses them and
raises ``SettingsError`` with a one-line reason on a bad value;
``Settings.describe()`` gives the lines printed at startup.

May import: the standard library, `zsnli.manifest` (file names, `zsnli.manifest.beside_model`) and
`zsnli.net_settings` (the values that name the server on the web: public URL, trusted proxies, allowed hosts and
origins; re-exported here). Imported by the serving modules (`zsnli.serving.startup`, `zsnli.serving.service`,
`zsnli.serving.app`, `zsnli.serve`).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Iterable, Mapping

from .manifest import CALIBRATION_NAME, MANIFEST_NAME, beside_model
from .net_settings import allowed_hosts, allowed_origins, forwarded_allow_ips, public_url  # noqa: F401 - re-exported


class SettingsError(ValueError):
    """A ZSNLI_* environment variable has an invalid value."""


#: A pinned hub revision (``ZSNLI_MODEL_REVISION``): the full commit hash the hub names snapshots by.
COMMIT_RE = re.compile(r"[0-9a-f]{40}")

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}

#: Values of ``ZSNLI_BACKEND``: torch, or ONNX Runtime on CPU (`zsnli.runtime.onnx_model`).
BACKENDS = ("torch", "onnx-fp32", "onnx-int8")
#: Values of ``ZSNLI_DTYPE`` (case-insensitive, an optional ``torch.`` prefix); the names
#: `zsnli.runtime.model` resolves (a test keeps the two lists equal).
DTYPES = ("float32", "fp32", "bfloat16", "bf16", "float16", "fp16", "half")

#: Values of ``ZSNLI_FIXED_SHAPES`` (case-insensitive): ``auto`` runs every forward in fixed shapes
#: (`zsnli.runtime.shapes`) when the dtype is bf16/fp16, ``on`` always, ``off`` never; the same
#: names as `zsnli.runtime.precision.FIXED_SHAPES_MODES` (a test keeps the two lists equal).
FIXED_SHAPES = ("auto", "on", "off")

#: The shortest ``ZSNLI_API_KEY`` accepted: a guard against a placeholder (``secret``, ``changeme``, one character)
#: guarding a server unnoticed, not a measure of strength (a key made by ``openssl rand -hex 32`` has 64).
MIN_API_KEY_CHARS = 16

#: Values of ``ZSNLI_LOG_LEVEL`` (case-insensitive; ``warn`` is read as ``warning``): uvicorn's levels.
LOG_LEVELS = ("critical", "error", "warning", "info", "debug", "trace")
#: Values of ``ZSNLI_SCORING`` (case-insensitive), the scoring of a request that names none: the names of
#: `zsnli.request_scoring.SCORINGS` (a test keeps the two lists equal; this module imports no numpy).
SCORING_NAMES = ("served", "pipeline", "embedding")
#: ``ZSNLI_MODEL_VARIANT``: ``small`` serves ``model_dir``, ``base`` its ``base/`` folder, ``auto`` base on CUDA
#: where the folder exists, else small (`zsnli.serving.startup.resolve_variant`).
MODEL_VARIANTS = ("auto", "small", "base")
#: The refusal of ``ZSNLI_MODEL_VARIANT=base`` with ``ZSNLI_MODEL_ID`` (checked before the hub cache is looked at).
HUB_BASE_REFUSAL = ("ZSNLI_MODEL_VARIANT=base serves <ZSNLI_MODEL_DIR>/base, not a hub model: unset ZSNLI_MODEL_ID "
                    "or ZSNLI_MODEL_VARIANT")

#: The valid range, inclusive, of every numeric setting: field -> (low, high). `Settings.validate`
#: checks it (before the server listens) and docs/configuration.md's table repeats it.
#: Bounds: the window cap at the largest window `zsnli.scoring` accepts (65536); max_labels
#: at 4096 so that T(K) = t * K ** b stays finite for every calibration range (`zsnli.scoring`
#: VALUE_RANGES); times at an hour; sizes where a larger value is a typo, not a plan.
RANGES: dict[str, tuple[float, float]] = {
    "max_length": (16, 65536),
    "token_budget": (1, 1 << 24),
    "max_batch_wait_ms": (0, 60_000),
    "max_padding": (0, 1),
    "max_labels": (1, 4096),
    "max_batch_items": (1, 100_000),
    "max_body_bytes": (1024, 1 << 30),
    "max_text_chars": (1, 10_000_000),
    "queue_capacity_pairs": (2, 100_000_000),
    "max_request_pairs": (2, 100_000_000),
    "request_share_pairs": (1, 100_000_000),
    "request_timeout_s": (0.01, 3600),
    "retry_after_s": (1, 3600),
    "drain_timeout_s": (0, 3600),
    "torch_threads": (1, 1024),
    "read_timeout_s": (0.1, 3600),
    "max_connections": (1, 100_000),
    "keep_alive_s": (0.1, 3600),
    "label_cache_entries": (0, 10_000_000),
}


def _number(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


def range_text(name: str) -> str:
    """``[low, high]`` of setting field ``name`` as docs/configuration.md and refusals print it."""
    low, high = RANGES[name]
    return f"[{_number(low)}, {_number(high)}]"


@dataclass(frozen=True)
class Settings:
    """Server configuration (see the table in docs/configuration.md).

    Paths: ``manifest_path``/``calibration_path`` default to the file of that
    name inside ``model_dir`` if present, else in ``model_dir``'s parent (the
    repository top level when ``model_dir`` is ``./model``). ``embedding_dir``
    (only read when calibration.json sets an ``embedding_weight``) defaults
    to ``<model_dir>/embedding`` if present, else the checkout's
    ``model/embedding`` (`zsnli.runtime.embedding.default_embedding_dir`).

    Hub models: ``model_id`` (``ZSNLI_MODEL_ID=org/name``) names a hub repository served
    from the local hub cache instead of ``model_dir`` (`zsnli.runtime.hub`); ``model_revision`` pins
    its commit (40 hex digits); ``allow_download`` lets the server download it once when
    it is not cached (off by default: no network).

    Variants: ``model_variant`` (``ZSNLI_MODEL_VARIANT``) picks the small model in ``model_dir`` or the base-size one
    in ``<model_dir>/base`` (`zsnli.serving.startup.resolve_variant`; a ``model_dir`` that is itself such a folder
    is that variant, `zsnli.manifest.variant_of`); ``base`` with ``model_id`` is refused (`HUB_BASE_REFUSAL`).

    Browsers: ``allowed_hosts`` (``ZSNLI_ALLOWED_HOSTS``) and ``allowed_origins`` (``ZSNLI_ALLOWED_ORIGINS``) are the
    ``Host`` names and the web pages besides the server's own that `zsnli.serving.origin_check` lets through
    (`zsnli.net_settings.allowed_hosts`, `zsnli.net_settings.allowed_origins`; unset: its defaults).
    """

    model_dir: str = "./model"
    model_variant: str = "auto"
    model_id: str | None = None
    model_revision: str | None = None
    allow_download: bool = False
    manifest_path: str | None = None
    calibration_path: str | None = None
    embedding_dir: str | None = None
    skip_manifest_check: bool = False
    device: str | None = None
    dtype: str | None = None
    fixed_shapes: str = "auto"
    max_length: int = 512
    token_budget: int | None = None
    max_batch_wait_ms: float = 3.0
    share_identical_rows: bool = True
    label_cache_entries: int = 4096
    max_padding: float = 0.5
    max_labels: int = 256
    max_batch_items: int = 64
    max_body_bytes: int = 2 * 1024 * 1024
    max_text_chars: int = 20000
    queue_capacity_pairs: int = 8192
    max_request_pairs: int = 8192
    request_share_pairs: int = 512
    request_timeout_s: float = 60.0
    retry_after_s: int = 1
    drain_timeout_s: float = 30.0
    exit_on_startup_error: bool = True
    torch_threads: int | None = None
    log_level: str = "info"
    backend: str = "torch"
    onnx_cache_dir: str | None = None
    read_timeout_s: float = 10.0
    max_connections: int = 512
    keep_alive_s: float = 75.0
    public_url: str | None = None
    forwarded_allow_ips: str | None = None
    allowed_hosts: str | None = None
    allowed_origins: str | None = None
    scoring: str = "served"
    api_key: str | None = field(default=None, repr=False)  # never logged: `describe` says only whether it is set

    # env var name -> field name
    @staticmethod
    def env_name(field_name: str) -> str:
        return "ZSNLI_" + field_name.upper()

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: Any) -> "Settings":
        """Read ``ZSNLI_*`` variables from ``env`` (default ``os.environ``); ``overrides`` win.

        Raises ``SettingsError`` on an unparsable or out-of-range value.
        """
        env = os.environ if env is None else env
        values: dict[str, Any] = {}
        for f in fields(cls):
            raw = env.get(cls.env_name(f.name))
            if raw is None:
                continue
            values[f.name] = _parse(f.name, f.default, raw)
        values.update(overrides)
        settings = cls(**values)
        settings.validate()
        return settings

    def with_(self, **changes: Any) -> "Settings":
        """A copy with some fields changed (validated)."""
        s = replace(self, **changes)
        s.validate()
        return s

    def __post_init__(self) -> None:
        for name, check in (("public_url", public_url), ("forwarded_allow_ips", forwarded_allow_ips),
                            ("allowed_hosts", allowed_hosts), ("allowed_origins", allowed_origins)):
            if getattr(self, name) is not None:  # checked and normalised however it was given (env or override)
                try:
                    object.__setattr__(self, name, check(getattr(self, name)))
                except ValueError as exc:
                    raise SettingsError(str(exc)) from None
        level = str(self.log_level).strip().lower()
        object.__setattr__(self, "log_level", "warning" if level == "warn" else level)
        object.__setattr__(self, "fixed_shapes", str(self.fixed_shapes).strip().lower())
        object.__setattr__(self, "scoring", str(self.scoring).strip().lower())
        object.__setattr__(self, "model_variant", str(self.model_variant).strip().lower())
        if self.api_key is not None and not self.api_key.strip():
            raise SettingsError(f"ZSNLI_API_KEY is set but empty: set a key of at least {MIN_API_KEY_CHARS} "
                                "characters (openssl rand -hex 32), or unset it to turn the key off")
        if self.api_key is not None and not re.fullmatch(r"[\x21-\x7e]+", self.api_key):  # a Bearer token's octets
            raise SettingsError("ZSNLI_API_KEY must be visible ASCII without spaces (it is sent as 'Authorization: "
                                "Bearer <key>'), got a value that is not (unset it to turn the key off)")
        if self.api_key is not None and len(self.api_key) < MIN_API_KEY_CHARS:  # never printed, not even in part
            raise SettingsError(f"ZSNLI_API_KEY must be at least {MIN_API_KEY_CHARS} characters, got "
                                f"{len(self.api_key)} (make one with: openssl rand -hex 32)")

    def validate(self) -> None:
        """Raise ``SettingsError`` when limits are inconsistent or out of range."""
        for name, (low, high) in RANGES.items():
            value = getattr(self, name)
            if value is not None and not low <= value <= high:
                raise SettingsError(f"{self.env_name(name)} must be in {range_text(name)}, got {value!r}")
        if self.log_level not in LOG_LEVELS:
            raise SettingsError(f"ZSNLI_LOG_LEVEL must be one of {', '.join(LOG_LEVELS)} (case-insensitive; warn = "
                                f"warning), got {self.log_level!r}")
        self._validate_hub()
        if self.dtype is not None and self.dtype.lower().removeprefix("torch.") not in DTYPES:
            raise SettingsError(f"ZSNLI_DTYPE must be one of {', '.join(DTYPES)} (or unset), got {self.dtype!r}")
        for name, choices in (("fixed_shapes", FIXED_SHAPES), ("scoring", SCORING_NAMES), ("backend", BACKENDS),
                              ("model_variant", MODEL_VARIANTS)):
            if getattr(self, name) not in choices:
                raise SettingsError(f"{self.env_name(name)} must be one of {', '.join(choices)}, "
                                    f"got {getattr(self, name)!r}")
        # A request with max_labels labels plus its content-free pairs must fit in an empty queue.
        if self.queue_capacity_pairs < 2 * self.max_labels:
            raise SettingsError(f"ZSNLI_QUEUE_CAPACITY_PAIRS ({self.queue_capacity_pairs}) must be >= 2 x "
                                f"ZSNLI_MAX_LABELS ({self.max_labels})")
        # Every single request is under the per-request cap (the cap is for arrays and lists of inputs).
        if self.max_request_pairs < 2 * self.max_labels:
            raise SettingsError(
                f"ZSNLI_MAX_REQUEST_PAIRS ({self.max_request_pairs}) must be >= 2 x ZSNLI_MAX_LABELS ({self.max_labels})"
            )
        if self.backend != "torch":
            if self.device not in (None, "cpu"):
                raise SettingsError(f"ZSNLI_BACKEND={self.backend} runs on the CPU only: "
                                    f"unset ZSNLI_DEVICE or set it to cpu, got {self.device!r}")
            if self.dtype not in (None, "float32", "fp32"):
                raise SettingsError(f"ZSNLI_BACKEND={self.backend} fixes the precision: "
                                    f"unset ZSNLI_DTYPE, got {self.dtype!r}")

    def _validate_hub(self) -> None:
        if self.model_id and self.model_variant == "base":
            raise SettingsError(HUB_BASE_REFUSAL)
        if self.model_revision is not None:
            if not self.model_id:
                raise SettingsError("ZSNLI_MODEL_REVISION is set without ZSNLI_MODEL_ID (it pins a hub model's commit)")
            if not COMMIT_RE.fullmatch(self.model_revision):
                raise SettingsError("ZSNLI_MODEL_REVISION must be a full 40-hex commit of the hub repository "
                                    f"(pinned; a branch or tag name moves), got {self.model_revision!r}")
        if self.model_id is not None and (not self.model_id.strip() or any(c.isspace() for c in self.model_id)):
            raise SettingsError(f"ZSNLI_MODEL_ID must be a hub model id such as org/name, got {self.model_id!r}")

    # ------------------------------------------------------------- resolved paths

    def _beside_model(self, explicit: str | None, name: str) -> Path:
        if explicit:
            return Path(explicit)
        if self.model_id:  # a hub snapshot's parent is the cache's snapshots/ folder
            return Path(self.model_dir) / name
        return beside_model(self.model_dir, name)

    def resolved_manifest_path(self) -> Path:
        """The training manifest to verify against (may not exist): ``manifest_path``, else the model
        directory's, else (a local directory only, not a hub snapshot) its parent's."""
        return self._beside_model(self.manifest_path, MANIFEST_NAME)

    def resolved_calibration_path(self) -> Path:
        """The calibration.json holding the scoring rule and temperature (may not exist); looked up as
        `resolved_manifest_path`."""
        return self._beside_model(self.calibration_path, CALIBRATION_NAME)

    def describe(self) -> list[str]:
        """``NAME=value`` lines for the startup log, one per setting. The files read are not named here
        (`zsnli.serving.startup.preflight` logs each one it reads, once it knows which model it serves);
        ``ZSNLI_MODEL_DIR`` says it is not used when ``ZSNLI_MODEL_ID`` is set."""
        lines = []
        for f in fields(self):
            value = getattr(self, f.name)
            line = f"{self.env_name(f.name)}={'(set)' if f.name == 'api_key' and value else repr(value)}"
            if f.name == "model_dir" and self.model_id:
                line += " (not used: ZSNLI_MODEL_ID is set)"
            lines.append(line)
        return lines


def _parse(name: str, default: Any, raw: str) -> Any:
    env = Settings.env_name(name)
    text = raw.strip()
    if isinstance(default, bool):
        low = text.lower()
        if low in _TRUE:
            return True
        if low in _FALSE:
            return False
        raise SettingsError(f"{env} must be a boolean (1/0/true/false), got {raw!r}")
    if name in ("device", "dtype", "manifest_path", "calibration_path", "embedding_dir", "onnx_cache_dir", "model_id",
                "model_revision", "forwarded_allow_ips", "public_url", "allowed_hosts", "allowed_origins"):
        return text or None  # the URL and address lists: checked by Settings (zsnli.net_settings)
    if name in ("torch_threads", "token_budget"):
        if not text:
            return None
        default = 0
    if isinstance(default, int):
        try:
            return int(text)
        except ValueError:
            raise SettingsError(f"{env} must be an integer, got {raw!r}") from None
    try:
        if isinstance(default, float):
            value = float(text)
            if value != value or value in (float("inf"), float("-inf")):
                raise ValueError(text)
            return value
    except ValueError as exc:
        raise SettingsError(f"{env} must be a number, got {raw!r}") from exc
    return text


_HOSTNAME = re.compile(r"(?!-)[A-Za-z0-9-]{1,63}(?<!-)(\.(?!-)[A-Za-z0-9-]{1,63}(?<!-))*\.?")


def listen_host(raw: str | None) -> str:
    """``HOST`` checked: an IPv4 or IPv6 address (``::1`` or bracketed ``[::1]``, given back without the
    brackets) or a host name (RFC 1123 labels); default ``0.0.0.0``. Raises ``SettingsError`` (one line)
    for anything else, e.g. ``localhost:8000`` (the port belongs in ``PORT``) or text with whitespace."""
    import ipaddress

    host = (raw or "").strip() or "0.0.0.0"
    bracketed = host.startswith("[") and host.endswith("]")
    candidate = host[1:-1] if bracketed else host
    try:
        address = ipaddress.ip_address(candidate)
    except ValueError:
        address = None
    if address is not None and (not bracketed or address.version == 6):
        return candidate
    if not bracketed and len(host) <= 253 and _HOSTNAME.fullmatch(host):
        return host
    hint = ""
    if not bracketed and host.count(":") == 1 and host.rpartition(":")[2].isdigit():
        hint = "; the port goes in PORT, not HOST"
    raise SettingsError(f"HOST must be an IP address (IPv6 as ::1 or [::1]) or a host name, without a port{hint}; "
                        f"got {raw!r}")


def listen_address(env: Mapping[str, str] | None = None) -> tuple[str, int]:
    """``(host, port)`` from ``HOST`` (default ``0.0.0.0``, `listen_host`) and ``PORT`` (default 8000) in
    ``env`` (default ``os.environ``). Raises ``SettingsError`` (one line) when PORT is not an integer in
    [1, 65535] or HOST is not an address or host name; nothing is resolved here (no network: `check_listen`)."""
    env = os.environ if env is None else env
    host = listen_host(env.get("HOST"))
    raw = env.get("PORT", "8000").strip() or "8000"
    if not raw.isdigit() or not 1 <= int(raw) <= 65535:
        raise SettingsError(f"PORT must be an integer in [1, 65535], got {env.get('PORT')!r}")
    return host, int(raw)


def check_listen(host: str, port: int) -> None:
    """Bind (and close) a socket on every address ``host`` resolves to, at ``port``, the way the server will
    (``SO_REUSEADDR``, IPv6 sockets IPv6-only), so what would fail there fails here first, before anything
    listens. Raises ``SettingsError`` naming HOST or PORT: a name that does not resolve, an address not on
    this machine, a port in use or one that needs privileges."""
    import errno
    import socket

    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (socket.gaierror, UnicodeError) as exc:
        raise SettingsError(f"HOST {host!r} does not resolve to an address ({exc}); set HOST to an IP address "
                            "or a name this machine resolves") from None
    for family, kind, proto, _, address in dict.fromkeys(infos):
        sock = socket.socket(family, kind, proto)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6 and hasattr(socket, "IPPROTO_IPV6"):
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(address)
        except OSError as exc:
            why = exc.strerror or str(exc)
            if exc.errno == errno.EADDRINUSE:
                raise SettingsError(f"PORT {port} is already in use on HOST {host} ({why}): stop the other server "
                                    "or set PORT to a free port") from None
            if exc.errno == errno.EACCES:
                raise SettingsError(f"PORT {port} needs privileges on HOST {host} ({why}): set PORT to 1024 or "
                                    "above") from None
            raise SettingsError(f"HOST {host} cannot be listened on ({why}): set HOST to an address of this "
                                "machine, or 0.0.0.0") from None
        finally:
            sock.close()


#: ZSNLI_* variables that belong to other tools, not to the server: the benchmark scripts'
#: ZSNLI_BENCH_*, zsnli-batch's ZSNLI_BATCH_*, ZSNLI_HOST/ZSNLI_PORT that validate.py hands to a --serve-cmd,
#: the client's and the zsnli command's ZSNLI_URL, and the bake-off service's own settings
#: (zsnli.compare.service.settings), ZSNLI_BAKEOFF_* and ZSNLI_RECEIPT_KEY; ZSNLI_RUNS_DIR: `zsnli.manifest.RUNS_ENV`.
OTHER_TOOLS_PREFIXES = ("ZSNLI_BENCH_", "ZSNLI_BATCH_", "ZSNLI_HOST", "ZSNLI_PORT", "ZSNLI_URL", "ZSNLI_BAKEOFF_",
                        "ZSNLI_RECEIPT_KEY", "ZSNLI_RUNS_DIR")
#: The bake-off's prefixes among them: `misspelt_settings` checks these names against the bake-off's own.
BAKEOFF_PREFIXES = ("ZSNLI_BAKEOFF_", "ZSNLI_RECEIPT_KEY")


def setting_names() -> list[str]:
    """The ``ZSNLI_*`` names the server reads, one per `Settings` field, in field order."""
    return [Settings.env_name(f.name) for f in fields(Settings)]


def closest_setting(name: str, names: Iterable[str] | None = None) -> str | None:
    """The setting name closest to ``name`` (``difflib``, ratio >= 0.75) among ``names`` (default
    `setting_names`), or None.

    Compared without the shared ``ZSNLI_`` prefix, which would make every name look close, and without
    letter case (``ZSNLI_max_labels`` is ``ZSNLI_MAX_LABELS``: environment names are case-sensitive, so
    the server would never read it).
    """
    import difflib

    names = setting_names() if names is None else list(names)
    stems = {k.removeprefix("ZSNLI_").upper(): k for k in names}
    stem = name[len("ZSNLI_"):] if name.upper().startswith("ZSNLI_") else name
    close = difflib.get_close_matches(stem.upper(), list(stems), n=1, cutoff=0.75)
    return stems[close[0]] if close else None


def unknown_settings(env: Mapping[str, str] | None = None) -> list[str]:
    """One warning line per ``ZSNLI_*`` variable in ``env`` (default ``os.environ``) that is
    no server setting (a typo is otherwise silently ignored), naming the closest setting
    when one is close (`closest_setting`). Variables of other tools (`OTHER_TOOLS_PREFIXES`)
    are skipped. (The server refuses to start on the close ones: `misspelt_settings`.)
    """
    env = os.environ if env is None else env
    known = set(setting_names())
    lines = []
    for name in sorted(env):
        if not name.startswith("ZSNLI_") or name in known or name.startswith(OTHER_TOOLS_PREFIXES):
            continue
        close = closest_setting(name)
        lines.append(f"unknown setting {name} ignored" + (f" (did you mean {close}?)" if close else ""))
    return lines


def misspelt_settings(env: Mapping[str, str] | None = None, bakeoff_names: Iterable[str] = ()) -> list[str]:
    """One refusal line per ``ZSNLI_*`` variable in ``env`` (default ``os.environ``) that is no setting but
    closely resembles one (`closest_setting`): ``ZSNLI_MAX_BATCH=abc`` (for ``ZSNLI_MAX_BATCH_ITEMS``), or differs
    from one only in letter case (``ZSNLI_max_labels``, ``zsnli_max_labels``: names are case-sensitive).

    ``bakeoff_names``: the bake-off service's variables (`zsnli.compare.service.settings.SETTING_NAMES`),
    known too and compared with (a ``ZSNLI_BAKEOFF_*`` name is checked against them only). A misspelt setting
    would silently leave its limit at the default, so `zsnli.serve.main` refuses to start on one (exit 3);
    names that resemble no setting stay warnings (`unknown_settings`): they may be another tool's.
    Variables of the other tools (`OTHER_TOOLS_PREFIXES` but the bake-off's) are skipped.
    """
    env = os.environ if env is None else env
    server, bakeoff = setting_names(), list(bakeoff_names)
    lines = []
    for name in sorted(env):
        upper = name.upper()
        if not upper.startswith("ZSNLI_") or name in server or name in bakeoff:
            continue
        if upper.startswith(BAKEOFF_PREFIXES):
            candidates = bakeoff
        elif upper.startswith(OTHER_TOOLS_PREFIXES):
            continue
        else:
            candidates = server + bakeoff
        close = closest_setting(name, candidates) if candidates else None
        if close:
            what = "names are case-sensitive: " if close.upper() == upper else ""
            shown = "(hidden)" if close == "ZSNLI_API_KEY" else repr(env[name])  # a key is never printed
            lines.append(f"unknown setting {name}={shown}: did you mean {close}? ({what}a misspelt setting would "
                         f"leave {close} at its default; rename it, or unset it)")
    return lines
