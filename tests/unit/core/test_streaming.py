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
