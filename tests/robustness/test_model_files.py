"""Item 1: bad model files. One clear message with a hint, a nonzero exit code, no
traceback, and no half-written file left in the cache."""

from __future__ import annotations

import hashlib
import subprocess
import sys

import pytest

from cli_runner import run_cli
from localspec.app import catalog as models_mod
from localspec.backend.llama import GGUF_MAGIC, VocabInfo
from localspec.errors import ModelError, TokenizerMismatchError
from localspec.app.catalog import Catalog, ModelPreset, PairPreset, assemble_mirror, resolve_model
from localspec.core.tokenizer import check_compatible




def assert_clear(err: str, *words: str) -> None:
    lines = [line for line in err.splitlines() if line.startswith(("error:", "hint:"))]
    assert lines and lines[0].startswith("error:"), err
    assert any(line.startswith("hint:") for line in lines), err
    for w in words:
        assert w in err, (w, err)


def test_missing_path(capsys, isolated_env):
    code, _, err = run_cli(capsys, "generate", "--mode", "none", "--target", str(isolated_env / "nope.gguf"), "hi")
    assert code == 3
    assert_clear(err, "not found")


def test_not_a_gguf(capsys, isolated_env):
    p = isolated_env / "notes.gguf"
    p.write_text("this is not a model\n" * 100)
    code, _, err = run_cli(capsys, "generate", "--mode", "none", "--target", str(p), "hi")
    assert code == 3
    assert_clear(err, "not a GGUF")


def test_tiny_file_with_gguf_magic_is_truncated(capsys, isolated_env):
    p = isolated_env / "stub.gguf"
    p.write_bytes(GGUF_MAGIC + b"\x03\x00\x00\x00" + b"\x00" * 100)
    code, _, err = run_cli(capsys, "generate", "--mode", "none", "--target", str(p), "hi")
    assert code == 3
    assert_clear(err, "truncated")


@pytest.mark.parametrize("fraction", [0.5, 0.02])
def test_truncated_real_gguf(capsys, isolated_env, tiny_path, fraction):
    data = tiny_path.read_bytes()
    p = isolated_env / "cut.gguf"
    p.write_bytes(data[: int(len(data) * fraction)])
    code, _, err = run_cli(capsys, "generate", "--mode", "none", "--target", str(p), "hi")
    assert code == 3
    assert_clear(err, "could not load", "download it again")


# -- the offline mirror ---------------------------------------------------------------
@pytest.fixture
def fake_mirror(tmp_path, monkeypatch):
    """An installed 'mirror' package of two parts, and a preset whose sha256 does not match."""
    pkg = tmp_path / "site" / "fake_mirror_part"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "a.bin").write_bytes(GGUF_MAGIC + b"x" * 3000)
    (pkg / "b.bin").write_bytes(b"y" * 3000)
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    good = hashlib.sha256(GGUF_MAGIC + b"x" * 3000 + b"y" * 3000).hexdigest()

    def preset(sha=good, size=6004):
        return ModelPreset(hf_repo="nobody/fake-mirror", hf_file="fake.gguf", size=size, sha256=sha,
                           mirror_extra="fake", mirror_parts=("fake_mirror_part/a.bin", "fake_mirror_part/b.bin"))

    return preset


def cache_files(root):
    return sorted(p.name for p in root.rglob("*") if p.is_file()) if root.exists() else []


def test_mirror_sha256_mismatch_leaves_nothing(fake_mirror, tmp_path):
    dest = tmp_path / "cache" / "models" / "fake.gguf"
    with pytest.raises(ModelError) as e:
        assemble_mirror(fake_mirror(sha="0" * 64), dest)
    assert "corrupt" in e.value.message and "pip install --force-reinstall" in e.value.hint
    assert cache_files(tmp_path / "cache") == []
    # the right checksum assembles
    assert assemble_mirror(fake_mirror(), dest) == dest and cache_files(tmp_path / "cache") == ["fake.gguf"]


def test_mirror_size_mismatch_leaves_nothing(fake_mirror, tmp_path):
    with pytest.raises(ModelError, match="corrupt"):
        assemble_mirror(fake_mirror(size=9999), tmp_path / "cache" / "fake.gguf")
    assert cache_files(tmp_path / "cache") == []


def test_mirror_interrupted_assembly_leaves_nothing(fake_mirror, tmp_path):
    def progress(stage, done, total):
        if done > 3000:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        assemble_mirror(fake_mirror(), tmp_path / "cache" / "fake.gguf", progress)
    assert cache_files(tmp_path / "cache") == []


def test_mirror_mismatch_through_cli(capsys, isolated_env, fake_mirror, monkeypatch):
    catalog = Catalog(default_pair="p", models={"fake": fake_mirror(sha="1" * 64)},
                      pairs={"p": PairPreset(target="fake", draft="fake")})
    monkeypatch.setattr(models_mod, "load_catalog", lambda path=None: catalog)
    code, _, err = run_cli(capsys, "generate", "--mode", "none", "--target", "fake", "hi")
    assert code == 3
    assert_clear(err, "corrupt", "force-reinstall")
    assert cache_files(isolated_env / "cache") == []


# -- the hub ----------------------------------------------------------------------------
def _http_error(cls_name: str, status: int):
    import httpx2 as httpx  # the HTTP client huggingface-hub 2.x uses
    from huggingface_hub import errors

    resp = httpx.Response(status, request=httpx.Request("GET", "https://huggingface.co/x"))
    return getattr(errors, cls_name)(f"{status} Client Error", response=resp)


def _connect_error():
    import httpx2 as httpx

    return httpx.ConnectError("[Errno -2] Name or service not known")


@pytest.mark.parametrize("ref, raiser, where, words", [
    ("hf:nobody/no-such-repo/x.gguf", lambda: _http_error("RepositoryNotFoundError", 404), "hf_hub_download",
     ["no repo", "nobody/no-such-repo"]),
    ("hf:nobody/repo/missing.gguf", lambda: _http_error("RemoteEntryNotFoundError", 404), "hf_hub_download",
     ["no file", "missing.gguf"]),
    ("hf:nobody/repo/x.gguf", lambda: __import__("huggingface_hub").errors.LocalEntryNotFoundError("offline"),
     "hf_hub_download", ["cannot reach", "not cached"]),
    # a glob needs the repo listing: with no network httpx raises its own ConnectError (was a traceback)
    ("hf:nobody/repo/*q4_k_m.gguf", _connect_error, "list_repo_files", ["cannot reach"]),
    ("hf:nobody/repo/x.gguf", _connect_error, "hf_hub_download", ["cannot reach"]),
])
def test_hub_failures_are_one_clear_error(capsys, isolated_env, monkeypatch, ref, raiser, where, words):
    import huggingface_hub

    monkeypatch.delenv("HF_HUB_OFFLINE")

    def fail(*a, **k):
        raise raiser()

    monkeypatch.setattr(huggingface_hub, where, fail)
    code, _, err = run_cli(capsys, "generate", "--mode", "none", "--target", ref, "hi")
    assert code == 3
    assert_clear(err, *words)


def test_offline_with_nothing_cached(capsys, isolated_env):
    code, _, err = run_cli(capsys, "generate", "--mode", "none", "--target", "hf:nobody/repo/x.gguf", "hi")
    assert code == 3
    assert_clear(err, "HF_HUB_OFFLINE")


def test_glob_matching_several_files_lists_them(isolated_env, monkeypatch):
    import huggingface_hub

    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setattr(huggingface_hub, "list_repo_files", lambda repo: ["a-q4.gguf", "b-q4.gguf", "README.md"])
    with pytest.raises(ModelError) as e:
        resolve_model("hf:nobody/repo/*q4.gguf")
    assert "2 files" in e.value.message and "a-q4.gguf" in e.value.hint and "b-q4.gguf" in e.value.hint


# -- tokenizers ---------------------------------------------------------------------------
def _vocab(texts, n_pad=0):
    texts = tuple(texts) + tuple(f"<|pad{i}|>".encode() for i in range(n_pad))
    return VocabInfo(2, len(texts), 1, 2, True, texts, tuple([0] * len(texts)))


def test_tokenizers_differ_names_first_id():
    base = [b"<s>", b"<bos>", b"</s>", b"a", b"b", b"c"]
    other = list(base)
    other[4] = b"B"
    with pytest.raises(TokenizerMismatchError) as e:
        check_compatible(_vocab(base), _vocab(other))
    assert "token id 4" in e.value.message and "'b'" in e.value.message and "'B'" in e.value.message
    assert "--mode lookup" in e.value.hint
    assert check_compatible(_vocab(base), _vocab(base, n_pad=3)) == len(base)  # padding only: fine


def test_tokenizers_differ_through_cli(tmp_path):
    """The Qwen 0.5B target with SmolLM2 as its draft: exit 4, the first differing id, no traceback."""
    qwen = resolve_model("qwen2.5-coder-0.5b")
    tiny = resolve_model("smollm2-135m")
    r = subprocess.run([sys.executable, "-m", "localspec.cli", "generate", "--mode", "draft", "--n-ctx", "256",
                        "--target", str(qwen), "--draft", str(tiny), "hi"],
                       capture_output=True, text=True, timeout=300,
                       env={**__import__("os").environ, "LOCALSPEC_CONFIG": str(tmp_path / "s.json")})
    assert r.returncode == 4, r.stderr
    assert "Traceback" not in r.stderr
    assert "token id 0" in r.stderr and "hint:" in r.stderr
