"""Fill in the middle on the server (issue 32, item 1) on the fake backend: ``POST /infill`` in
llama.cpp's shapes (whole, streamed, ``response_fields``, ``n_predict`` 0), ``/v1/completions``
with ``suffix``, the FIM prompt the worker builds (user text stays text), prompt lookup drafting
from the suffix, and the 400s (a model without FIM tokens, bad fields)."""

import json

import pytest

from fakes import MID, PRE, SUF, FakeModel, WithFimTokens, greedy_reference
from fake_server import app_client
from localspec.core.engine import SpeculativeEngine
from localspec.server.infill import InfillBody, fim_prompt_tokens
from localspec.server.bodies import parse_request

#: plain-text tokens of the text "<|fim_middle|>" (with special parsing it is the MID token)
MARKER_AS_TEXT = [1, 2, 1]


class FimFakeModel(WithFimTokens, FakeModel):
    """The fake model with FIM tokens; ``"<|fim_middle|>"`` is its special text for MID."""

    def tokenize(self, text: str, add_special=None, parse_special: bool = True) -> list[int]:
        out: list[int] = []
        for w in text.split():
            if w == "<|fim_middle|>":
                out += [MID] if parse_special else MARKER_AS_TEXT
            else:
                out.append(int(w[1:]) if w[1:].isdigit() else 0)  # another word (a file name, a separator): 0
        return out


#: the fake target of fixture ``client`` (tests/conftest.py)
MODEL = FimFakeModel


def events(r) -> list[str]:
    return [line[5:].strip() for line in r.text.splitlines() if line.startswith("data:")]


def fim_ids(prefix: str, suffix: str) -> list[int]:
    e = SpeculativeEngine(FimFakeModel(), None)
    return [PRE, *e.tokenize(prefix, special=False), SUF, *e.tokenize(suffix, special=False), MID]


def test_the_worker_builds_the_fim_prompt_with_user_text_as_text():
    engine = SpeculativeEngine(FimFakeModel(), None)
    req = parse_request({"prompt": "t3 <|fim_middle|> t4", "suffix": "t5 <|fim_middle|>"}, "completion")
    ids = fim_prompt_tokens(engine, req)
    assert ids == [PRE, 3, *MARKER_AS_TEXT, 4, SUF, 5, *MARKER_AS_TEXT, MID]
    assert ids.count(MID) == 1
    infill = InfillBody.model_validate({"input_prefix": "t3", "input_suffix": "t4", "prompt": "t9",
                                        "input_extra": [{"filename": "a", "text": "t7 t8"}]}).request()
    assert fim_prompt_tokens(engine, infill)[-6:] == [PRE, 3, 9, SUF, 4, MID]
    # the typed middle (``prompt``) is user text too: a marker typed there stays text (llama.cpp parses it; we
    # do not let a user's text become a control token), so the prompt holds exactly one FIM_MID
    typed = InfillBody.model_validate({"input_prefix": "t3 <|fim_middle|>", "input_suffix": "t4",
                                       "prompt": "t9 <|fim_middle|>"}).request()
    assert fim_prompt_tokens(engine, typed) == [PRE, 3, *MARKER_AS_TEXT, 9, *MARKER_AS_TEXT, SUF, 4, MID]


def test_infill_answers_in_llama_cpp_shape(client):
    r = client.post("/infill", json={"input_prefix": "t3 t5", "input_suffix": "t7 t8", "n_predict": 5,
                                     "cache_prompt": True, "samplers": ["top_k", "infill"], "t_max_predict_ms": 500})
    assert r.status_code == 200, r.text
    body = r.json()
    want = greedy_reference(fim_ids("t3 t5", "t7 t8"), 5)
    assert body["content"] == "".join(f"t{t} " for t in want)
    assert body["stop"] is True and body["stop_type"] == "limit" and body["tokens_predicted"] == 5
    assert body["tokens_evaluated"] == len(fim_ids("t3 t5", "t7 t8"))
    t = body["timings"]
    assert t["predicted_n"] == 5 and t["prompt_n"] + t["cache_n"] == body["tokens_evaluated"]
    assert body["speculation"]["mode"] == "lookup"


def test_infill_stream_is_llama_cpp_events_without_done(client):
    r = client.post("/infill", json={"input_prefix": "t3 t5", "input_suffix": "t7 t8", "n_predict": 5,
                                     "stream": True})
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    data = events(r)
    assert "[DONE]" not in data
    chunks = [json.loads(d) for d in data]
    assert all(c["stop"] is False for c in chunks[:-1]) and chunks[-1]["stop"] is True
    assert chunks[-1]["content"] == "" and chunks[-1]["tokens_predicted"] == 5
    text = "".join(c["content"] for c in chunks[:-1])
    assert text == client.post("/infill", json={"input_prefix": "t3 t5", "input_suffix": "t7 t8",
                                                "n_predict": 5}).json()["content"]
    assert [i for c in chunks[:-1] for i in c["tokens"]] == greedy_reference(fim_ids("t3 t5", "t7 t8"), 5)


def test_response_fields_pick_nested_values_under_their_path(client):
    r = client.post("/infill", json={"input_prefix": "t3", "input_suffix": "t4", "n_predict": 2,
                                     "response_fields": ["content", "timings/predicted_n", "nope/x", "truncated"]})
    assert set(r.json()) == {"content", "timings/predicted_n", "truncated"}
    assert r.json()["timings/predicted_n"] == 2


def test_n_predict_0_caches_the_prompt_and_sends_nothing(client):
    body = client.post("/infill", json={"input_prefix": "t3 t9", "input_suffix": "t4", "n_predict": 0}).json()
    assert body["content"] == "" and body["tokens_predicted"] == 0
    again = client.post("/infill", json={"input_prefix": "t3 t9", "input_suffix": "t4", "n_predict": 2}).json()
    assert again["tokens_cached"] == again["tokens_evaluated"] - 1  # all but the last prompt token reused


def test_lookup_drafts_from_the_suffix():
    """The fake's next token depends on the last two tokens only: with the suffix ending as before,
    the output is the same, and written into the suffix it is drafted by prompt lookup and accepted."""
    with app_client(FimFakeModel()) as c:
        plain = c.post("/infill", json={"input_prefix": "t3", "input_suffix": "t7 t8", "n_predict": 12}).json()
        out = greedy_reference(fim_ids("t3", "t7 t8"), 12)
        suffix = " ".join(f"t{t}" for t in out) + " t7 t8"
        told = c.post("/infill", json={"input_prefix": "t3", "input_suffix": suffix, "n_predict": 12}).json()
    assert told["content"] == plain["content"]
    assert told["speculation"]["drafters"]["lookup"]["accepted"] >= 8
    assert told["timings"]["draft_n_accepted"] == told["speculation"]["drafters"]["lookup"]["accepted"]
    assert told["speculation"]["target_passes"] < plain["speculation"]["target_passes"]


def test_completions_with_suffix_fill_in_the_middle(client):
    r = client.post("/v1/completions", json={"prompt": "t3 t5", "suffix": "t7 t8", "max_tokens": 5})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["choices"][0]["text"] == "".join(f"t{t} " for t in greedy_reference(fim_ids("t3 t5", "t7 t8"), 5))
    assert body["usage"]["prompt_tokens"] == len(fim_ids("t3 t5", "t7 t8"))


@pytest.mark.parametrize("path, body, param", [
    ("/v1/completions", {"prompt": "t3", "suffix": "t4"}, "suffix"),
    ("/infill", {"input_prefix": "t3", "input_suffix": "t4"}, "input_suffix"),
])
def test_a_model_without_fim_tokens_is_a_400_that_says_so(path, body, param):
    with app_client(FakeModel()) as c:
        r = c.post(path, json=body)
        assert r.status_code == 400
        err = r.json()["error"]
        assert "has no fill-in-the-middle tokens" in err["message"] and "Qwen2.5-Coder" in err["message"]
        assert err["param"] == param and err["code"] == "fim_unsupported"
        # an empty suffix is no insertion: a plain completion, as before
        assert c.post("/v1/completions", json={"prompt": "t3", "suffix": "", "max_tokens": 2}).status_code == 200


@pytest.mark.parametrize("body, param", [
    ({"input_suffix": "t4"}, "input_prefix"),
    ({"input_prefix": "t3"}, "input_suffix"),
    ({"input_prefix": 3, "input_suffix": "t4"}, "input_prefix"),
    ({"input_prefix": "t3", "input_suffix": "t4", "input_extra": "t5"}, "input_extra"),
    ({"input_prefix": "t3", "input_suffix": "t4", "input_extra": [{"filename": "a"}]}, "input_extra[0].text"),
    ({"input_prefix": "t3", "input_suffix": "t4", "prompt": ["t5"]}, "prompt"),
    ({"input_prefix": "t3", "input_suffix": "t4", "n_predict": -2}, "n_predict"),
    ({"input_prefix": "t3", "input_suffix": "t4", "temperature": 9}, "temperature"),
    ({"input_prefix": "t3", "input_suffix": "t4", "stop": [""]}, "stop"),
    ({"input_prefix": "t3", "input_suffix": "t4", "grammar": "root ::= \"a\""}, "grammar"),
    ({"input_prefix": "t3", "input_suffix": "t4", "n_probs": 3}, "n_probs"),
    ({"input_prefix": "t3", "input_suffix": "t4", "n_indent": -1}, "n_indent"),
    ({"input_prefix": "t3", "input_suffix": "t4", "n_indent": "4"}, "n_indent"),
    ({"input_prefix": "t3", "input_suffix": "t4", "n_indent": 2.5}, "n_indent"),
    ({"input_prefix": "t3", "input_suffix": "t4", "t_max_predict_ms": -2}, "t_max_predict_ms"),
    ({"input_prefix": "t3", "input_suffix": "t4", "t_max_predict_ms": True}, "t_max_predict_ms"),
])
def test_bad_infill_fields_are_400s_naming_them(client, body, param):
    r = client.post("/infill", json=body)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param, r.json()


def test_seed_minus_one_is_random_and_fields_of_llama_cpp_are_accepted(client):
    r = client.post("/infill", json={"input_prefix": "t3", "input_suffix": "t4", "n_predict": 2, "seed": -1,
                                     "n_indent": 4, "id_slot": -1, "t_max_prompt_ms": 500, "cache_prompt": False,
                                     "t_max_predict_ms": 500.0})
    assert r.status_code == 200, r.text
    # 0 and -1: the rules are off
    r = client.post("/infill", json={"input_prefix": "t3", "input_suffix": "t4", "n_predict": 2, "n_indent": 0,
                                     "t_max_predict_ms": -1})
    assert r.status_code == 200 and r.json()["stop_type"] == "limit", r.text


def test_end_of_generation_is_stop_type_eos():
    model = FimFakeModel(eog_after=8)
    with app_client(model) as c:
        body = c.post("/infill", json={"input_prefix": "t3", "input_suffix": "t4", "n_predict": 20}).json()
    assert body["stop_type"] == "eos" and body["tokens_predicted"] < 20
    # llama.cpp counts the end-of-generation token among the predicted ones (its n_decoded)
    n_text = len(body["content"].split())  # the fake writes one word per token
    assert body["tokens_predicted"] == body["timings"]["predicted_n"] == n_text + 1


def test_answer_draft_counts_leave_out_what_was_cut():
    """/infill's timings count draft tokens only for positions in the answer (issue 43): a round whose
    accepted draft runs past the answer's end (a stop word, n_predict, an end-of-generation token)
    counts up to there; a round rejected inside the answer counts whole."""
    from localspec.core.events import DrafterId, RoundStats
    from localspec.server.infill import answer_draft_counts

    def rnd(drafted, accepted, committed):
        return RoundStats(0, DrafterId.LOOKUP, (), (), drafted, accepted, committed, 0.0, 0.0)

    rounds = [rnd(0, 0, 1), rnd(5, 1, 2), rnd(8, 8, 9)]  # 12 tokens without a cut
    assert answer_draft_counts(rounds, 12) == (13, 9)
    assert answer_draft_counts(rounds[:2] + [rnd(8, 8, 2)], 5) == (7, 3)  # a stop after 2 of the last round's 8
    assert answer_draft_counts(rounds[:2] + [rnd(8, 8, 0)], 2) == (1, 1)  # the stop began in the round before
    assert answer_draft_counts([rnd(8, 8, 0)], 0) == (0, 0)  # an empty answer
    assert answer_draft_counts([rnd(5, 2, 2)], 3) == (5, 2)  # the resampled token was end-of-generation (counted)
