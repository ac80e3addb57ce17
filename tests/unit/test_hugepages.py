"""Huge pages for the weights (localspec.hugepages): the kernel's setting, finding new regions,
collapsing them, and the command-line switch. The real model's decoding with and without
huge pages is compared in tests/integration/test_tiny.py."""

import ctypes
import platform

import pytest

from localspec import calibration, cli, hugepages
from localspec.options import settings_from_args


@pytest.mark.parametrize("text, mode", [("always [madvise] never\n", "madvise"), ("[always] madvise never\n", "always"),
                                        ("always madvise [never]\n", "never"), ("garbage\n", None)])
def test_thp_mode_reads_the_bracketed_choice(tmp_path, monkeypatch, text, mode):
    f = tmp_path / "enabled"
    f.write_text(text)
    monkeypatch.setattr(hugepages, "THP_SETTING", str(f))
    assert hugepages.thp_mode() == mode
    assert hugepages.available() == (platform.system() == "Linux" and mode in ("always", "madvise"))


def test_no_thp_setting_means_not_available(tmp_path, monkeypatch):
    monkeypatch.setattr(hugepages, "THP_SETTING", str(tmp_path / "missing"))
    assert hugepages.thp_mode() is None and not hugepages.available()
    assert hugepages.collapse([(0, 1 << 30)]) == 0  # nothing asked of the kernel


def _kernel_at_least(major: int, minor: int) -> bool:
    try:
        got = tuple(int(x) for x in platform.release().split("-")[0].split(".")[:2])
    except ValueError:
        return False
    return got >= (major, minor)


@pytest.mark.skipif(platform.system() != "Linux", reason="reads /proc/self/maps")
def test_new_regions_finds_a_fresh_anonymous_mapping():
    size = 64 << 20
    with hugepages.new_regions() as found:
        buf = bytearray(size)  # malloc: a private anonymous mapping this large
    big = [r for r in found if r[1] - r[0] >= size]
    assert big, found
    del buf
    assert not set(big) & hugepages.anonymous_regions()  # freed: gone from the maps


@pytest.mark.skipif(not (hugepages.available() and _kernel_at_least(6, 1)),
                    reason="needs Linux >= 6.1 (MADV_COLLAPSE) with transparent huge pages always/madvise")
def test_collapse_moves_written_memory_into_huge_pages():
    size = 64 << 20
    with hugepages.new_regions() as found:
        buf = bytearray(b"\x01") * size  # written, as llama.cpp's loaded weights are
    addr = ctypes.addressof((ctypes.c_char * size).from_buffer(buf))
    mine = [(lo, hi) for lo, hi in found if lo <= addr < hi]
    assert mine, (hex(addr), found)
    before = hugepages.huge_page_bytes()
    done = hugepages.collapse(mine)
    after = hugepages.huge_page_bytes()
    # the region (it may have merged with a neighbour) is trimmed to whole 2 MiB pages: of the
    # buffer itself at most a page at each end stays in small pages
    assert done >= size - 2 * hugepages.HUGE_PAGE
    assert after - before >= size - 2 * hugepages.HUGE_PAGE
    assert buf[12345] == 1 and buf[-1] == 1  # the contents stay


def test_collapse_skips_small_and_unmapped_regions():
    assert hugepages.collapse([(0x1000, 0x1000 + (1 << 20))]) == 0  # under min_bytes
    # an address range nothing is mapped at: madvise fails, nothing raises
    assert hugepages.collapse([(1 << 46, (1 << 46) + (64 << 20))]) == 0


@pytest.mark.parametrize("argv, expected", [([], True), (["--huge-pages", "off"], False),
                                            (["--huge-pages", "on"], True)])
def test_huge_pages_switch_reaches_both_models(argv, expected):
    ns = cli.build_parser().parse_args(["generate", *argv, "hello"])
    s = settings_from_args(ns)
    assert s.target.huge_pages is expected and s.draft.huge_pages is expected


def test_calibration_cache_key_tells_huge_pages_apart(tmp_path):
    f = tmp_path / "m.gguf"
    f.write_bytes(b"GGUF" + bytes(2000))

    class M:
        path, n_ctx, n_threads, n_batch, n_ubatch, n_gpu_layers, flash_attn = f, 512, 2, 128, 128, 0, False

    a, b = M(), M()
    a.huge_pages, b.huge_pages = True, False
    ka, kb = calibration.model_cost_key(a), calibration.model_cost_key(b)
    assert ka["huge_pages"] is True and kb["huge_pages"] is False
    assert calibration.cost_cache_path(ka) != calibration.cost_cache_path(kb)
