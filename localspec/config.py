"""Settings, validated at the edge with pydantic (unknown keys rejected).

Why these hold together: it is the lowest layer every other one reads, so each rule that more than one
layer applies lives here once: the option declarations, the prompt-fits-the-context rule, the context
window's floor, the drafting modes, the cache folder, the catalog's file, the OpenAI API's shared rules
(function names, object ids) and the one translator of validation errors.

Every option is declared once, here, with :func:`option`: its type (the annotation), its
default, its allowed range (pydantic constraints), its help, its unit and the TUI form's
label. The command-line flags (:mod:`localspec.app.flags`), the TUI settings form
(``tui.dialogs``) and the server's request fields (:mod:`localspec.server.bodies`, via
:func:`request_field`) are derived from these declarations. The CLI and the TUI build the
same models; a ``pydantic.ValidationError`` becomes a readable message only there (see
:func:`format_validation_error`).
"""

from __future__ import annotations

import os
import tomllib
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Sequence

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_core import PydanticCustomError

from localspec.errors import ConfigError
from localspec.rpc_endpoints import RPC_LOAD_SILENCE, RPC_TIMEOUT, RPC_TIMEOUT_TOKENS, split_endpoints

#: the drafting modes that use one drafter every round, each named as that drafter
#: (a :class:`localspec.core.events.DrafterId` value: the engine's ``FixedPolicy(DrafterId(mode))``)
FIXED_DRAFT_MODES = ("draft", "lookup", "none")
#: every drafting mode, in ``--mode``'s order: ``auto`` chooses a drafter and a draft length each round
#: by the measured costs, the others are :data:`FIXED_DRAFT_MODES`
DRAFT_MODES = ("auto", *FIXED_DRAFT_MODES)
DraftMode = Literal[DRAFT_MODES]  # type: ignore[valid-type]  # Literal["auto", "draft", "lookup", "none"]
FlashAttn = Literal["auto", "on", "off"]
Repack = Literal["auto", "on", "off"]
PrefillCopy = Literal["auto", "off"]


def option(default: Any = ..., *, help: str, label: str | None = None, unit: str | None = None,
           default_text: str | None = None, blank: str | None = None, **constraints: Any) -> Any:
    """Declare one option: a pydantic ``Field`` whose metadata the front-ends read.

    Args:
        default: the default value (``default_factory=`` may be given instead, in ``constraints``).
        help: what the option does, in a few words (the CLI's help, the field's description).
        label: the TUI settings form's label (a model's option: without "target"/"draft").
        unit: the unit of a number ("tokens", ...), when it has one.
        default_text: how the CLI's help names the default when the value alone does not say
            it (``None`` -> "fresh entropy").
        blank: what an empty TUI field means (it becomes None), shown in it as a placeholder.
        constraints: pydantic's ``ge``, ``gt``, ``le``, ``lt``, ``default_factory``.
    """
    extra = {k: v for k, v in (("label", label), ("unit", unit), ("default_text", default_text),
                                ("blank", blank)) if v is not None}
    return Field(default, description=help, json_schema_extra=extra or None, **constraints)


def option_info(model: type[BaseModel], name: str) -> dict[str, Any]:
    """An option's front-end metadata: ``label``, ``unit``, ``default_text``, ``blank`` (those given)."""
    extra = model.model_fields[name].json_schema_extra
    return dict(extra) if isinstance(extra, dict) else {}


#: the pydantic constraints :func:`request_field` copies from an option
_CONSTRAINTS = ("ge", "gt", "le", "lt")


def constraints(model: type[BaseModel], name: str) -> dict[str, Any]:
    """An option's numeric constraints: ``{"ge": 0.0, "le": 2.0}`` (those it has)."""
    out: dict[str, Any] = {}
    for m in model.model_fields[name].metadata:
        for attr in _CONSTRAINTS:
            if getattr(m, attr, None) is not None:
                out[attr] = getattr(m, attr)
    return out


def request_field(model: type[BaseModel], name: str) -> Any:
    """A request's optional field for option ``name`` of ``model``: default None (the server's
    setting), the option's range and help. The server's request models declare
    ``temperature: float | None = request_field(SamplingParams, "temperature")``."""
    return Field(None, description=model.model_fields[name].description, **constraints(model, name))


def context_room(n_ctx: int, prompt_tokens: int) -> int:
    """Tokens that may be generated after a prompt of ``prompt_tokens`` in a context window of
    ``n_ctx`` tokens (prompt and output share the window); <= 0 when the prompt fills it."""
    return n_ctx - prompt_tokens


def fits_context(n_ctx: int, prompt_tokens: int, max_tokens: int = 1) -> bool:
    """The one prompt-fits-the-context rule (engine, server, chat): a prompt of ``prompt_tokens``
    fits a window of ``n_ctx`` tokens when it leaves room for ``max_tokens`` generated tokens
    (at least one: every generation makes one)."""
    return max(1, max_tokens) <= context_room(n_ctx, prompt_tokens)


def expand_path(path: str | os.PathLike) -> Path:
    """A path the user gave, with ``~`` and environment variables (``$VAR``, ``${VAR}``)
    expanded, as a shell would have done (it did not for a config file, an environment
    variable, a quoted argument or a path typed in the UI)."""
    return Path(os.path.expanduser(os.path.expandvars(os.fspath(path))))


def cache_root() -> Path:
    """localspec's cache folder: ``$LOCALSPEC_CACHE`` (``~`` and variables expanded, :func:`expand_path`),
    default ``~/.cache/localspec``. It holds the measured costs (``costs/``), the repack verdicts
    (``repack/``), the prompt snapshots (``prompts/``) and the models assembled from their parts (``models/``)."""
    env = os.environ.get("LOCALSPEC_CACHE")
    return expand_path(env) if env else Path.home() / ".cache" / "localspec"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True)


#: the highest temperature accepted (OpenAI's API: 0..2)
TEMPERATURE_MAX = 2.0


class SamplingParams(_Strict):
    """How logits become the distribution sampled from. Shapes target and draft alike.

    Temperature 0 means greedy decoding (argmax); top_k 0, top_p 1 and min_p 0 disable
    those filters.
    """

    #: 0..2 everywhere, as in OpenAI's API (the CLI and the TUI allowed up to 100 before; above 2
    #: the distribution is close to uniform noise)
    temperature: float = option(0.0, ge=0.0, le=TEMPERATURE_MAX, help="0 = greedy", label="temperature")
    top_k: int = option(0, ge=0, help="keep the k most probable tokens, 0 = off", label="top-k (0 = off)")
    top_p: float = option(1.0, gt=0.0, le=1.0, help="nucleus sampling, 1 = off", label="top-p (1 = off)")
    min_p: float = option(0.0, ge=0.0, le=1.0, help="drop tokens below min-p x the top probability, 0 = off",
                          label="min-p (0 = off)")
    seed: int | None = option(None, ge=0, help="random seed", default_text="fresh entropy",
                              label="seed (blank = random)", blank="blank: fresh entropy")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


#: the sampling presets a conversation may choose (the TUI's conversation settings): name -> parameters.
#: A preset replaces temperature, top-k, top-p and min-p; the seed stays the settings' own.
SAMPLING_PRESETS: dict[str, SamplingParams] = {
    "greedy": SamplingParams(temperature=0.0),
    "balanced": SamplingParams(temperature=0.7, top_k=40, top_p=0.9, min_p=0.05),
    "creative": SamplingParams(temperature=1.0, top_p=0.95, min_p=0.02),
}


def preset_sampling(name: str, base: SamplingParams) -> SamplingParams:
    """``base`` with the filters of the preset ``name`` ("" or unknown: ``base`` itself), its seed kept."""
    preset = SAMPLING_PRESETS.get(name)
    if preset is None:
        return base
    return preset.model_copy(update={"seed": base.seed})


#: the largest ``draft_max`` (and ``draft_min``) a user (or a request) may set, tokens
DRAFT_MAX_LIMIT = 64
#: most tokens a round drafts in mode ``auto`` when the user sets no ``draft_max``: the limit. The
#: policy drafts as long as the evidence and the measured verify curve make pay, up to this
#: (llama-server's ngram-mod drafts up to 64 too); calibration measures the verify cost up to it + 1.
#: Why not more: on every curve measured (tests/data/cpu-curves) a pass past ~32 tokens costs about
#: 0.3 T(1) a token more, so even a copy accepted to the last token gains little past 64 (Zen 4,
#: 1.5B: ceiling 3.46x at g = 31, 3.25x at g = 64 with 512 tokens of context; a 128-token round
#: would reach ~3.4x) while a longer calibration and a longer rejected tail cost every user
AUTO_DRAFT_MAX = DRAFT_MAX_LIMIT
#: tokens a round drafts in the fixed modes (``draft``, ``lookup``) when the user sets no ``draft_max``
FIXED_DRAFT_MAX = 8


class DraftParams(_Strict):
    """How tokens are drafted each round.

    ``draft_max`` is the user's cap; None (the default) means the mode's own: :data:`AUTO_DRAFT_MAX`
    in mode ``auto`` (which chooses each round's length by the measured costs, so a long cap
    costs nothing where long drafts do not pay), :data:`FIXED_DRAFT_MAX` in the fixed modes
    (which always draft that many). Read the effective value as :attr:`cap`.
    """

    mode: DraftMode = option("auto", label="mode", help="auto: measured choice per round; draft: draft model; "
                             "lookup: prompt lookup; none: target only")
    draft_max: int | None = option(None, ge=1, le=DRAFT_MAX_LIMIT, unit="tokens", label="draft length (gamma)",
                                   help="most tokens drafted per round (gamma)",
                                   default_text=f"{AUTO_DRAFT_MAX} in mode auto, which chooses each round's length up "
                                   f"to it by the measured costs; {FIXED_DRAFT_MAX} in draft and lookup",
                                   blank=f"blank: the mode's own ({AUTO_DRAFT_MAX} in auto, "
                                   f"{FIXED_DRAFT_MAX} otherwise)")
    draft_min: int = option(0, ge=0, le=DRAFT_MAX_LIMIT, unit="tokens",
                            help="drafts shorter than this are not verified; at most --draft-max")
    draft_p_min: float = option(0.0, ge=0.0, le=1.0, label="draft p-min",
                                help="the draft model stops below this top-1 probability")
    max_ngram: int = option(3, ge=1, le=16, unit="tokens", help="prompt lookup: longest n-gram matched")
    min_ngram: int = option(1, ge=1, le=16, unit="tokens", help="prompt lookup: shortest n-gram matched")

    @model_validator(mode="after")
    def _ngram_order(self) -> "DraftParams":
        if self.min_ngram > self.max_ngram:
            raise ValueError(f"min_ngram ({self.min_ngram}) must not exceed max_ngram ({self.max_ngram})")
        if self.draft_min > self.cap:
            raise ValueError(f"draft_min ({self.draft_min}) must not exceed draft_max ({self.cap})")
        return self

    @property
    def cap(self) -> int:
        """Most tokens drafted per round: ``draft_max``, or the mode's default when it is None."""
        if self.draft_max is not None:
            return self.draft_max
        return AUTO_DRAFT_MAX if self.mode == "auto" else FIXED_DRAFT_MAX


#: the former fixed default context window, tokens: now the smallest default window
#: (:mod:`localspec.backend.context`), the window a cost key is capped at
#: (:data:`localspec.backend.calibration.COST_KEY_CONTEXT`) and the bench's fixed window
MIN_DEFAULT_CONTEXT = 4096


class ModelSettings(_Strict):
    """One GGUF model to load: a catalog preset name or a path, and llama.cpp context settings."""

    model: str = option(..., min_length=1, label="model",
                        help="model: preset name, .gguf path or hf:OWNER/REPO/FILE")
    n_ctx: int | None = option(None, ge=16, le=1 << 20, unit="tokens", help="context window, tokens",
                               default_text="the model's training context where this machine's memory allows it "
                               f"(else the largest power of two that fits, at least {MIN_DEFAULT_CONTEXT}; a draft "
                               "model: at most the target's)", blank="blank: the training context, as memory allows")
    n_batch: int = option(512, ge=1, le=1 << 16, unit="tokens", help="most tokens per llama_decode")
    n_threads: int = option(default_factory=lambda: os.cpu_count() or 1, ge=1, le=1024, label="CPU threads",
                            help="CPU threads", default_text="all cores")
    n_gpu_layers: int = option(0, ge=-1, label="GPU layers", unit="layers",
                               help="layers on the GPU, -1 = all; needs a CUDA/Metal build of llama-cpp-python")
    flash_attn: FlashAttn = option("auto", help="llama.cpp flash attention: auto (default) = the faster one as "
                                   "measured by localspec calibrate (off until measured)")
    huge_pages: bool = option(True, help="on (default): weights read into memory and kept in 2 MiB transparent huge "
                              "pages where the kernel allows (Linux), faster decoding; off: the file is mapped "
                              "(llama.cpp's default)")
    repack: Repack = option("auto", help="llama.cpp's weight repacking (AMX, interleaved Q4_0): auto (default) = only "
                            "where a test decode in a child process did not crash and was not slower (it crashes on "
                            "some virtualized AMX Xeons); on; off (llama-server's --no-repack)")
    prefill_copy: PrefillCopy = option("auto", help="auto (default): where the weights are repacked but the repack "
                                       "probe measured the standard layout reading prompts at least 1.1x faster, a "
                                       "second copy of the weights (and of the KV cache) in the standard layout reads "
                                       "prompts of 64+ tokens, if memory allows; off: one copy")
    rpc: tuple[str, ...] = option((), help="llama.cpp RPC workers HOST:PORT[,HOST:PORT...] that hold this model's "
                                  "layers (started with localspec worker; trusted networks only)")
    rpc_timeout: float = option(RPC_TIMEOUT, gt=0, le=86400, unit="seconds",
                                help="RPC workers: seconds a one-token pass may go unanswered before the workers "
                                "count as stalled (the request fails, naming them); a pass of m tokens gets "
                                f"1 + m/{RPC_TIMEOUT_TOKENS} times as long; loading, each tensor sent gets as long "
                                f"(at least {RPC_LOAD_SILENCE:g} s)")

    @field_validator("rpc", mode="before")
    @classmethod
    def _endpoints(cls, value: object) -> tuple[str, ...]:
        return split_endpoints(value)


def check_stop(stop: Sequence[str]) -> None:
    """The stop strings' one rule, for the settings and the server's requests: none is empty.

    Raises:
        ValueError: "stop strings must not be empty".
    """
    if any(s == "" for s in stop):
        raise ValueError("stop strings must not be empty")


class GenerationParams(_Strict):
    """Per-request limits."""

    max_tokens: int = option(512, ge=1, le=1 << 20, unit="tokens", label="max tokens", help="most tokens generated")
    stop: tuple[str, ...] = option((), help="stop string, not empty (repeatable)")
    #: llama.cpp's ``n_indent`` (``/infill``): end before the first line after the output's first
    #: newline indented by fewer characters (:class:`localspec.core.streaming.IndentLimit`); 0: off
    min_indent: int = Field(0, ge=0, description="characters; end before a later line indented less (0: off)")
    #: llama.cpp's ``t_max_predict_ms`` (``/infill``), in seconds: once this long has passed since the
    #: first output token, the output ends at the next token whose text holds a newline; None: off
    newline_time_limit: float | None = Field(None, gt=0, description="seconds after the first token; then end "
                                                                    "at the next newline (None: off)")

    @model_validator(mode="after")
    def _no_empty_stop(self) -> "GenerationParams":
        check_stop(self.stop)
        return self


#: the model catalog (package data): :mod:`localspec.app.catalog` validates and resolves it
CATALOG_PATH = Path(__file__).resolve().with_name("catalog.toml")


def read_catalog(path: Path = CATALOG_PATH) -> dict[str, Any]:
    """The catalog file's TOML, as read, not validated (:func:`localspec.app.catalog.load_catalog` validates it).

    Raises:
        OSError: the file cannot be read.
        tomllib.TOMLDecodeError: it is not TOML.
    """
    return tomllib.loads(path.read_text(encoding="utf-8"))


def default_pair(path: Path = CATALOG_PATH) -> tuple[str, str]:
    """(target, draft) preset names of the catalog's ``default_pair``: its one declaration, read
    here so that the settings' defaults are always the pair ``localspec models`` marks as default.

    Raises:
        ConfigError: the catalog cannot be read or names no such pair (the full check of the
            catalog is :func:`localspec.app.catalog.load_catalog`'s).
    """
    try:
        data = read_catalog(path)
        pair = data["pairs"][data["default_pair"]]
        return str(pair["target"]), str(pair["draft"])
    except (OSError, tomllib.TOMLDecodeError, KeyError, TypeError) as e:
        raise ConfigError(f"cannot read the default model pair from {path}: {type(e).__name__}: {e}",
                          "reinstall localspec (the catalog ships with the package)") from e


class UISettings(_Strict):
    """How the terminal UI shows things (no effect on generation)."""

    answer_view: Literal["tokens", "markdown"] = option(
        "tokens", label="answer view", help="how a finished answer shows: tokens (coloured by speculation) or "
                                            "markdown (rendered); Ctrl+T switches one answer")


class Settings(_Strict):
    """Everything needed to load models and generate: what the CLI and TUI share.

    The default ``target`` and ``draft`` are the catalog's default pair (:func:`default_pair`).
    """

    target: ModelSettings = Field(default_factory=lambda: ModelSettings(model=default_pair()[0]))
    draft: ModelSettings = Field(default_factory=lambda: ModelSettings(model=default_pair()[1]),
                                 description="same tokenizer as the target")
    sampling: SamplingParams = SamplingParams()
    drafting: DraftParams = DraftParams()
    generation: GenerationParams = GenerationParams()
    ui: UISettings = UISettings()


def needs_draft_model(settings: Settings) -> bool:
    """Whether ``settings``' drafting mode uses the draft model (``draft``, and ``auto``, which may choose it):
    the one rule of when it is loaded (the loader), shown (the CLI) and asked for (the TUI)."""
    return settings.drafting.mode in ("draft", "auto")


#: the draft memory's default budget, tokens: earlier requests' prompts and answers that prompt lookup
#: copies from (:class:`localspec.core.drafters.DraftMemory`); 4 MiB with its index. A round's search is a
#: binary search in the index (well under a millisecond at this size); adding a request re-sorts the index
#: (some tens of milliseconds at this size, once per request)
DRAFT_MEMORY_TOKENS = 1 << 18
#: bytes a remembered token takes: the int32 token, and in the index its int64 position and the int32 token
#: (:data:`localspec.core.drafters.memory.TOKEN_BYTES` is this number; a test checks it against the arrays)
DRAFT_MEMORY_BYTES_PER_TOKEN = 16
_DRAFT_MEMORY_MIB = DRAFT_MEMORY_TOKENS * DRAFT_MEMORY_BYTES_PER_TOKEN >> 20

#: the prompt-prefix snapshots' default budget at most, MiB: three 15,000-token agent prompts of the default
#: pair (28 KiB a token in the 1.5B's cache, 12 KiB in the 0.5B's)
PROMPT_CACHE_MB = 2048
#: the share of the memory available once the models are loaded that the default budget may take: the KV
#: windows take up to half of what was available before (localspec.backend.context), the rest is headroom
PROMPT_CACHE_SHARE = 0.25

#: most requests waiting while the engine runs one, by default (``--queue-size``)
QUEUE_SIZE = 8


class ServerSettings(_Strict):
    """How ``localspec serve`` listens, queues and limits requests; its flags are built from these
    declarations (:mod:`localspec.app.flags`) and :func:`localspec.server.create_app` takes one."""

    host: str = option("127.0.0.1", min_length=1, help="address to bind", default_text="127.0.0.1: this machine only")
    port: int = option(8080, ge=0, le=65535, help="TCP port")
    api_key: tuple[str, ...] = option((), repr=False, help="require Authorization: Bearer KEY on every request; "
                                      "repeatable or comma-separated (as llama-server): each key is a scope with "
                                      "its own cached prompts and draft memory, which no other key's requests "
                                      "reach", default_text="$LOCALSPEC_API_KEY if set")
    api_key_file: str | None = option(None, help="read API keys from FILE, one a line (blank lines and lines "
                                      "starting with # skipped), besides --api-key (as llama-server)")
    queue_size: int = option(QUEUE_SIZE, ge=0, le=1 << 16, unit="requests",
                             help="most requests waiting while the engine runs one (0: none wait); beyond, 429")
    max_body_mb: float = option(8.0, gt=0, le=1 << 14, unit="MiB", help="largest request body, MiB; beyond, 413")
    shutdown_grace: float = option(5.0, ge=0, le=3600, unit="seconds",
                                   help="on SIGTERM or Ctrl-C: seconds the running answer may take to finish "
                                   "(waiting requests get 503 at once); then it ends with an error event saying why")
    cors_origins: tuple[str, ...] = option((), help="let web pages from ORIGIN (e.g. http://localhost:3000) call the "
                                           "server from a browser; repeatable; '*' allows any origin (warned); "
                                           "default: no cross-origin access")
    log_level: Literal["critical", "error", "warning", "info", "debug"] = option("info", help="the server log's level")
    draft_memory_tokens: int = option(DRAFT_MEMORY_TOKENS, ge=0, le=1 << 26, unit="tokens",
                                      help="draft memory: tokens of earlier requests (prompt + answer) that prompt "
                                      "lookup may copy from, shared across requests, the oldest evicted first; "
                                      f"{DRAFT_MEMORY_BYTES_PER_TOKEN} bytes a token with its index (the default "
                                      f"{DRAFT_MEMORY_TOKENS} take {_DRAFT_MEMORY_MIB} MiB); 0 = off")
    prompt_cache_mb: float | None = option(None, ge=0, le=1 << 20, unit="MiB",
                                           help="prompt prefixes kept as KV-cache snapshots in memory, so an agent "
                                           "alternating between long prompts does not read either again: most MiB "
                                           "they take (the least recently used evicted; about 40 KiB a token for "
                                           "the default pair, target and draft); 0 = off (only the live cache is "
                                           "reused)",
                                           default_text=f"min({PROMPT_CACHE_MB}, a quarter of the memory available "
                                           "once the models are loaded)")
    prompt_cache_disk_mb: float | None = option(None, ge=0, le=1 << 24, unit="MiB",
                                                default_text="min(4096, a tenth of the free space there)",
                                                help="also keep the prompt-prefix snapshots on disk, under "
                                                "$LOCALSPEC_CACHE/prompts (default ~/.cache/localspec/prompts, "
                                                "private to the user), so a restarted server does not read an "
                                                "agent's prompt again: most MiB every file there takes (the least "
                                                "recently used deleted, whatever model or version wrote it); "
                                                "0 = off; needs --prompt-cache-mb above 0")
    stream_keepalive: float = option(10.0, ge=0, le=3600, unit="seconds",
                                     help="a streamed answer that has nothing to send for this long (its prompt is "
                                     "being read) sends a chunk without content, so that clients' idle timeouts "
                                     "(Qwen Code's) see it alive; 0 = off")
    default_max_tokens: int | None = option(None, ge=1, unit="tokens",
                                            help="max_tokens of a chat request that leaves it out (--max-tokens)",
                                            default_text="the room left in the context window")

    @field_validator("api_key", mode="before")
    @classmethod
    def _split_keys(cls, keys: Any) -> Any:
        """``"a,b"``, ``["a", "b,c"]`` -> ``("a", "b", "c")`` (spaces around a key dropped, empty ones between
        commas skipped). A value that holds no key at all (``--api-key ""``, ``--api-key ,``: an unset shell
        variable, most often) is refused: taken as no keys, it would start a server that lets every client in."""
        if keys is None:
            return ()
        if isinstance(keys, str):
            keys = [keys]
        if isinstance(keys, (list, tuple)) and all(isinstance(k, str) for k in keys):
            if any(not part.replace(",", "").strip() for part in keys):
                raise user_error("an API key given is empty: a server started so would let every client in; give "
                                 "the key (is its shell variable set?), or leave --api-key out for a server "
                                 "without keys")
            return tuple(dict.fromkeys(k.strip() for part in keys for k in part.split(",") if k.strip()))
        return keys

    @model_validator(mode="before")
    @classmethod
    def _keys_from_file(cls, data: Any) -> Any:
        """Add the keys of ``api_key_file`` (one a line) to ``api_key``."""
        if not isinstance(data, dict) or not data.get("api_key_file"):
            return data
        path = data["api_key_file"]
        try:
            lines = Path(path).read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as e:
            raise user_error(f"cannot read the API key file {path}: {getattr(e, 'strerror', None) or e}",
                             at="api_key_file") from None
        keys = [ln.strip() for ln in lines if ln.strip() and not ln.strip().startswith("#")]
        if not keys:
            raise user_error(f"the API key file {path} holds no key (one a line)", at="api_key_file")
        given = data.get("api_key") or ()
        return {**data, "api_key": ([given] if isinstance(given, str) else list(given)) + keys}

    @model_validator(mode="after")
    def _disk_tier_needs_memory_tier(self) -> "ServerSettings":
        """The disk tier keeps the memory tier's snapshots: with that tier off it would silently keep nothing."""
        if self.prompt_cache_mb == 0 and self.prompt_cache_disk_mb:
            raise user_error(f"{self.prompt_cache_disk_mb:g} MiB on disk keeps nothing with --prompt-cache-mb 0 (it "
                             "keeps the snapshots kept in memory): give --prompt-cache-mb above 0, or leave "
                             "--prompt-cache-disk-mb out",
                             at="prompt_cache_disk_mb")
        return self

    @property
    def max_body(self) -> int:
        """The body limit in bytes."""
        return int(self.max_body_mb * (1 << 20))


#: OpenAI's rule for function (tool) names, plus ``.``: 1 to 64 letters, digits, ``_``, ``.``, ``-``; it also keeps
#: names free of chat-template markup. The server's request bodies validate every function name with it.
FUNCTION_NAME = r"^[A-Za-z0-9_.\-]{1,64}$"


def object_id(prefix: str) -> str:
    """A new id of an OpenAI API object: ``prefix`` + 24 random hex digits (from a UUID4), as
    ``"chatcmpl-"``, ``"cmpl-"``, ``"resp_"``, ``"call_"`` ids are made."""
    return prefix + uuid.uuid4().hex[:24]


#: the error type of a validator's message written whole for the user (:func:`user_error`)
USER_ERROR = "localspec"


def user_error(message: str, code: str | None = None, at: str | None = None) -> PydanticCustomError:
    """A validator's error that the front-ends show as written (no "(got ...)" added). Raise it from
    a pydantic validator.

    Args:
        message: the sentence shown.
        code: the server's error code (``"unsupported_parameter"``), or None.
        at: a path below the validated value that the error names (``"function.name"``), or None.
    """
    return PydanticCustomError(USER_ERROR, message, {k: v for k, v in (("code", code), ("at", at)) if v} or None)


def error_path(loc: Sequence[str | int]) -> str:
    """A pydantic error location as a path: ``("messages", 0, "content")`` -> ``"messages[0].content"``."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


@dataclass(frozen=True)
class InvalidValue:
    """One invalid value of a pydantic validation error, as every front-end says it.

    Attributes:
        path: where it is (:func:`error_path`; ``""``: the whole input).
        reason: pydantic's message without its ``"Value error, "`` prefix, or a :func:`user_error`'s.
        got: ``" (got <repr>)"`` for a value that is not an object, else ``""``.
        written: the reason is a :func:`user_error`'s, to be shown as it is.
        code: a :func:`user_error`'s code, or None.
    """

    path: str
    reason: str
    got: str = ""
    written: bool = False
    code: str | None = None

    def line(self, whole: str = "settings") -> str:
        """``path: reason (got value)`` (``whole`` names an empty path); a :func:`user_error` as written."""
        return self.reason if self.written else f"{self.path or whole}: {self.reason}{self.got}"


def invalid_values(err: ValidationError | Sequence[dict], skip: int = 0) -> list[InvalidValue]:
    """The one translator of pydantic errors (a ``ValidationError``, or FastAPI's
    ``RequestValidationError.errors()``) into what the CLI, the TUI, the settings file and the server
    say, in pydantic's order; ``skip`` drops leading location parts (FastAPI's ``"body"``)."""
    out = []
    for e in err.errors() if isinstance(err, ValidationError) else err:
        written = e.get("type") == USER_ERROR
        got = f" (got {e['input']!r})" if "input" in e and not isinstance(e["input"], dict) else ""
        ctx = (e.get("ctx") or {}) if written else {}
        path = ".".join(p for p in (error_path(tuple(e.get("loc", ()))[skip:]), ctx.get("at")) if p)
        out.append(InvalidValue(path, e.get("msg", "invalid").removeprefix("Value error, "), got, written,
                                ctx.get("code")))
    return out


def format_validation_error(err: ValidationError) -> str:
    """One line per invalid field: ``field.path: reason (got value)`` (:func:`invalid_values`)."""
    return "\n".join(v.line() for v in invalid_values(err))
