from localspec.core.drafters.lookup import find_candidate


def test_matches_longest_ngram_first():
    #         0  1  2  3  4  5  6  7  8  9
    tokens = [1, 2, 3, 4, 9, 2, 3, 5, 1, 2, 3]
    # last 3-gram (1,2,3) matches at 0 -> continuation 4, 9, 2, ...
    assert find_candidate(tokens, 3, 1, 3) == ([4, 9, 2], 3)


def test_falls_back_to_shorter_ngram():
    tokens = [7, 8, 5, 6, 1, 8]
    # no 3- or 2-gram ending in (1, 8) elsewhere; 1-gram 8 at index 1 -> 5, 6
    assert find_candidate(tokens, 3, 1, 2) == ([5, 6], 1)


def test_no_match_gives_empty():
    assert find_candidate([1, 2, 3, 4], 3, 1, 5) == ([], 0)
    assert find_candidate([], 3, 1, 5) == ([], 0)
    assert find_candidate([5], 3, 1, 5) == ([], 0)


def test_prefers_most_recent_match():
    tokens = [1, 2, 10, 11, 1, 2, 20, 21, 1, 2]
    assert find_candidate(tokens, 2, 1, 2) == ([20, 21], 2)


def test_continuation_repeats_with_the_period_of_the_match():
    tokens = [1, 2, 3, 1, 2]
    # match at 0, period 3: 3, 1, 2, 3, 1, 2, ...
    assert find_candidate(tokens, 2, 2, 8) == ([3, 1, 2, 3, 1, 2, 3, 1], 2)


def test_repetition_from_most_recent_match():
    tokens = [9, 9, 9, 7, 7, 7, 7]
    cand, n = find_candidate(tokens, 3, 1, 4)
    assert cand == [7, 7, 7, 7] and n == 3


def test_draft_max_zero():
    assert find_candidate([1, 2, 1, 2], 2, 1, 0) == ([], 0)


def test_prefers_the_match_with_the_longest_agreeing_context():
    # the 1-gram 2 occurs at 1 (after 1) and at 5 (after 9); the text ends "... 1 2":
    # the copy continues from the match whose earlier token also agrees
    tokens = [1, 2, 3, 4, 9, 2, 7, 8, 1, 2]
    assert find_candidate(tokens, 1, 1, 2) == ([3, 4], 1)


def test_code_edit_copies_from_the_file_not_an_earlier_common_ngram():
    file = [10, 11, 12, 13, 14, 15, 16, 17, 18, 19]
    # the output has copied 10..13, and the n-gram (12, 13) also occurred earlier followed by 99
    tokens = [12, 13, 99] + file + [50] + [10, 11, 12, 13]
    assert find_candidate(tokens, 2, 1, 3) == ([14, 15, 16], 2)


def test_find_match_reports_how_long_the_context_agrees():
    from localspec.core.drafters.lookup import find_match

    file = [10, 11, 12, 13, 14, 15, 16, 17, 18, 19]
    tokens = [5] + file + [50] + [10, 11, 12, 13]
    # the 3-gram (11, 12, 13) matches in the file, and the token before it (10) agrees too
    assert find_match(tokens, 3, 1, 3) == ([14, 15, 16], 3, 4)
    assert find_match([1, 2, 3, 4], 3, 1, 5) == ([], 0, 0)
