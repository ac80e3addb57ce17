"""The common prefix a KV cache keeps when it syncs to a context (``KvCache.sync``, every round's rollback of
the draft model): slices compared at C speed, the span of the first difference halved."""

import random

from localspec.backend.kv_cache import _common_prefix


def _naive(a, b, n):
    common = 0
    while common < n and a[common] == b[common]:
        common += 1
    return common


def test_the_common_prefix_is_the_naive_one_wherever_the_first_difference_lies():
    rng = random.Random(7)
    for case in range(3000):
        n = rng.randint(0, 200)
        a = [rng.randint(0, 3) for _ in range(n)]
        b = list(a)
        if n and case % 4:
            b[rng.randrange(n)] = 9  # one difference, anywhere (the first, the last, inside a halved span)
        a += [1] * rng.randint(0, 2)  # rejected draft tokens left in the cache
        b += [2] * rng.randint(1, 3)  # the committed tokens past it
        m = min(len(a), len(b) - 1)
        assert _common_prefix(a, tuple(b) if case % 2 else b, m) == _naive(a, b, m)
    assert _common_prefix([5, 6, 7], [5, 6, 8, 1], 3) == 2 and _common_prefix([], [1], 0) == 0
