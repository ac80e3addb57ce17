"""Huge pages for the weights (localspec.backend.hugepages): the kernel's setting, finding new regions,
collapsing them, and the command-line switch. The real model's decoding with and without
huge pages is compared in tests/integration/test_tiny.py."""

import ctypes
import platform

import pytest

from localspec import cli

from localspec.backend import calibration

from localspec.backend import hugepages
from localspec.app.flags import settings_from_args


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


class _Mapping:
    """A private anonymous mapping made with libc's mmap, as malloc makes one for a large buffer
    (malloc itself may serve it from free space of the heap instead: see the next test)."""

    def __init__(self, size: int):
        libc = ctypes.CDLL(None, use_errno=True)
        self._mmap, self._munmap = libc.mmap, libc.munmap
        self._mmap.restype, self._mmap.argtypes = ctypes.c_void_p, [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                                                                    ctypes.c_int, ctypes.c_int, ctypes.c_long]
        self._munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        # PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS
        self.addr = self._mmap(None, size, 0x1 | 0x2, 0x02 | 0x20, -1, 0)
        assert self.addr not in (None, ctypes.c_void_p(-1).value), ctypes.get_errno()
        self.size = size
        self.view = (ctypes.c_char * size).from_address(self.addr)

    def close(self):
        self._munmap(self.addr, self.size)


@pytest.mark.skipif(platform.system() != "Linux", reason="reads /proc/self/maps")
def test_new_regions_finds_a_fresh_anonymous_mapping():
    size = 64 << 20
    with hugepages.new_regions() as found:
        m = _Mapping(size)
        ctypes.memset(m.addr, 1, size)
    mine = [(lo, hi) for lo, hi in found if lo <= m.addr < hi]
    assert mine and mine[0][1] - mine[0][0] >= size, found
    assert hugepages.anonymous_regions()[mine[0]] >= size  # resident once written
    m.close()
    # unmapped: the region is gone, or (merged with a neighbour) no longer the same
    assert not set(mine) & hugepages.anonymous_regions().keys()


@pytest.mark.skipif(platform.system() != "Linux", reason="reads /proc/self/smaps")
def test_new_regions_finds_memory_written_into_an_existing_region():
    """Memory malloc hands out from a region that existed before (free heap space) counts once it is written."""
    size = 32 << 20
    m = _Mapping(size)  # exists before the block, nothing resident yet
    with hugepages.new_regions() as found:
        ctypes.memset(m.addr, 1, size)
    assert any(lo <= m.addr < hi for lo, hi in found), found
    with hugepages.new_regions() as again:  # nothing written: nothing found
        pass
    assert not any(lo <= m.addr < hi for lo, hi in again)
    m.close()


@pytest.mark.skipif(not (hugepages.available() and _kernel_at_least(6, 1)),
                    reason="needs Linux >= 6.1 (MADV_COLLAPSE) with transparent huge pages always/madvise")
def test_collapse_moves_written_memory_into_huge_pages():
    size = 64 << 20
    with hugepages.new_regions() as found:
        m = _Mapping(size)
    ctypes.memset(m.addr, 1, size)  # written, as llama.cpp's loaded weights are
    mine = [(lo, hi) for lo, hi in found if lo <= m.addr < hi]
    assert mine, (hex(m.addr), found)
    before = hugepages.huge_page_bytes()
    done = hugepages.collapse(mine)
    after = hugepages.huge_page_bytes()
    # the region (it may have merged with a neighbour) is trimmed to whole 2 MiB pages: of the
    # buffer itself at most a page at each end stays in small pages
    assert done >= size - 2 * hugepages.HUGE_PAGE
    assert after - before >= size - 2 * hugepages.HUGE_PAGE
    assert m.view[12345] == b"\x01" and m.view[size - 1] == b"\x01"  # the contents stay
    m.close()


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
