from localspec.core.streaming import TextAssembler


def test_utf8_split_across_tokens_released_whole():
    data = "héllo 世界 🙂".encode()
    a = TextAssembler()
    seen = []
    for i in range(len(data)):
        a.push(data[i : i + 1])
        seen.append(a.text)
    a.finish()
    assert a.text == "héllo 世界 🙂"
    assert all("\ufffd" not in s for s in seen)


def test_stop_string_found_across_tokens():
    a = TextAssembler(stop=(" ha ha ha",))
    for piece in [b"ha", b" ha", b" h", b"a ha", b" ha"]:
        a.push(piece)
    assert a.stop_at == 2
    assert a.tokens_before_stop() == 1
    a.truncate_tokens(a.tokens_before_stop())
    assert a.text == "ha"


def test_holds_back_possible_stop_prefix():
    a = TextAssembler(stop=("END",))
    a.push(b"abc E")
    assert a.safe_end() == 4  # "E" might start "END"
    a.push(b"x")
    assert a.safe_end() == len("abc Ex")


def test_stop_inside_token_keeps_token_start():
    a = TextAssembler(stop=("XY",))
    a.push(b"ab")
    a.push(b"cXYd")
    assert a.stop_at == 3
    assert a.tokens_before_stop() == 2
    assert a.safe_end() == 3


# -- llama.cpp's n_indent (IndentLimit) ---------------------------------------------------------

import random  # noqa: E402

from localspec.core.streaming import IndentLimit  # noqa: E402


def llama_cpp_indent_cut(pieces, n_indent):
    """llama.cpp's server, ``process_token``'s n_indent rule, token by token (the reference):
    (token index where it stopped, the text cut to) or (None, the whole text)."""
    text, has_new_line, last_nl = "", False, 0
    for i, piece in enumerate(pieces):
        text += piece
        if has_new_line and n_indent > 0:
            if last_nl > 0:
                pos, indent = last_nl, 0
                while pos < len(text) and text[pos] in " \t":
                    indent += 1
                    pos += 1
                if pos < len(text) and indent < n_indent:
                    return i, text[:pos]
            nl = text.find("\n", last_nl)
            if nl >= 0:
                last_nl = nl + 1
        if "\n" in piece:
            has_new_line = True
    return None, text


def ours(pieces, n_indent):
    """(token index where IndentLimit cut, the text cut to) or (None, the whole text)."""
    limit, text = IndentLimit(n_indent), ""
    for i, piece in enumerate(pieces):
        text += piece
        if (cut := limit.cut(text)) is not None:
            return i, text[:cut]
    return None, text


def random_code(rng):
    lines = []
    for _ in range(rng.randint(1, 12)):
        kind = rng.random()
        if kind < 0.15:
            lines.append("")  # blank line
        elif kind < 0.25:
            lines.append(" " * rng.randint(1, 9))  # whitespace only
        else:
            lines.append(rng.choice(["", " ", "  ", "    ", "\t", "        ", "\t    "])
                         + rng.choice(["x = 1", "return y", "if a:", "pass", "# note"]))
    return "\n".join(lines) + rng.choice(["", "\n", "\nend"])


def split(text, rng):
    cuts = sorted(rng.sample(range(1, len(text)), min(len(text) - 1, rng.randint(0, len(text) // 2)))) if len(text) > 1 else []
    bounds = [0, *cuts, len(text)]
    return [text[a:b] for a, b in zip(bounds, bounds[1:])]


def test_indent_limit_cuts_where_llama_cpp_does():
    """On 3,000 random code texts in random token splits, each followed by blank lines (so that llama.cpp's
    check, a token late and one line per token, catches up): both rules cut the text at the same place,
    ours no later (in tokens) than llama.cpp's."""
    rng = random.Random(7)
    stopped_inside = 0
    for _ in range(3000):
        pieces = split(random_code(rng), rng)
        n = rng.choice([1, 2, 4, 8])
        stopped_inside += llama_cpp_indent_cut(pieces, n)[0] is not None
        pieces += ["\n"] * 40
        ref_at, ref_text = llama_cpp_indent_cut(pieces, n)
        at, cut_text = ours(pieces, n)
        assert ref_at is not None and at is not None
        assert cut_text == ref_text, (pieces, n)
        assert at <= ref_at
    assert stopped_inside > 500  # many cuts fell inside the code, not in the blank lines after it


def test_indent_limit_examples():
    assert ours(["def f():\n", "    x = 1\n", "\n", "    y = 2\n"], 4) == (2, "def f():\n    x = 1\n")  # blank line
    assert ours(["    x = 1\n", "    y\n", "z"], 4) == (2, "    x = 1\n    y\n")
    assert ours(["x\n", "  ", "  ", "y\n", "  z"], 4) == (4, "x\n    y\n  ")  # the whitespace stays
    assert ours(["a\nb\nc"], 0) == (None, "a\nb\nc")  # 0: off
    assert ours(["first line is never checked\n    ok"], 4) == (None, "first line is never checked\n    ok")


def test_the_stop_word_found_is_known():
    """The stop string found (issue 43: /infill's ``stopping_word``): the earliest; of two there, the first given."""
    from localspec.core.streaming import TextAssembler

    a = TextAssembler(["cd", "bc", "b"])
    for piece in (b"a", b"bcd", b"e"):
        a.push(piece)
    assert (a.stop_at, a.stop_word) == (1, "bc")
    assert TextAssembler(["x"]).stop_word is None
