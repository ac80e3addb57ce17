"""Fill in the middle: ``POST /infill`` as llama.cpp's server defines it, and the FIM prompt of a
request (``/infill``, or ``/v1/completions`` with ``suffix``).

``/infill`` (llama.cpp ``tools/server/README.md``, "POST /infill"; its handler ``post_infill`` in
``server-context.cpp``), so that llama.vscode and llama.vim work unchanged:

- request: ``input_prefix`` and ``input_suffix`` (strings, required), ``input_extra`` (a list of
  ``{"filename": str, "text": str}``: other files, before the FIM prefix), ``prompt`` (the typed
  start of the middle, placed after the prefix as llama.cpp does), and /completion's options that
  change the output: ``n_predict`` (-1: until the context is full; 0: the prompt is only cached),
  ``temperature``, ``top_k``, ``top_p``, ``min_p``, ``seed`` (-1: random), ``stop``, ``stream``,
  ``response_fields``, ``cache_prompt`` (false: no cached prefix reused or left), the editor
  plugins' line rules ``n_indent`` (the output ends before a later line indented by fewer
  characters; :class:`localspec.core.streaming.IndentLimit`) and ``t_max_predict_ms`` (once this
  many milliseconds have passed since the first token, the output ends at the next newline);
  localspec's ``speculation`` (``memory`` too). ``samplers`` (the server's sampling applies: llama.vim's
  ``["top_k", "top_p", "infill"]`` without a temperature is answered greedily by default, where
  llama-server samples at temperature 1 through its infill sampler), ``t_max_prompt_ms`` (unused by
  llama.cpp too), ``id_slot`` and other options of llama.cpp's own machinery are accepted and ignored; the few
  that would change the output and cannot be honoured (``grammar``, ``json_schema``,
  ``n_probs``, ``logit_bias``) are a 400 naming them (:data:`localspec.server.refused.REFUSED_FIELDS`).
- response: ``{content, tokens, id_slot, stop: true, model, tokens_predicted, tokens_evaluated,
  prompt, has_new_line, truncated, stop_type ("eos" | "word" | "limit"), stopping_word,
  tokens_cached, timings: {cache_n, prompt_n, prompt_ms, prompt_per_token_ms, prompt_per_second,
  predicted_n, predicted_ms, predicted_per_token_ms, predicted_per_second, draft_n,
  draft_n_accepted}}`` plus localspec's ``speculation``; with ``response_fields`` only those
  (a ``"timings/prompt_n"`` path is returned under that key, as llama.cpp does). ``tokens_predicted``
  and ``predicted_n`` count an end-of-generation token sampled, as llama.cpp's ``n_decoded`` does; with a
  stop word (``stop_type`` "word", ``stopping_word`` the string), the tokens that start before it; ``draft_n``
  and ``draft_n_accepted`` only the draft tokens of positions in the answer (:func:`answer_draft_counts`).
  ``truncated``: the answer ran to the end of the context window (``n_predict`` -1 or past the room the
  prompt leaves; llama-server with its default of no context shift says the same, ``stop_type`` "limit").
- stream (``stream: true``): server-sent events ``data: {content, tokens, stop: false, id_slot,
  tokens_predicted, tokens_evaluated}`` per round, then the final object above with ``stop: true``
  and empty ``content``; no ``[DONE]`` (llama.cpp sends none on this endpoint).

Errors are OpenAI's error object (as every route of this server); a model without FIM tokens is
a 400 saying so (llama.cpp answers 501 "Infill is not supported by this model").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, ClassVar

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator, model_validator

from localspec.app.fim import FimInput, check_fim, fim_prompt
from localspec.config import user_error
from localspec.errors import ConfigError
from localspec.server.bodies import GenerationRequest, SamplingBody
from localspec.server.messages import said
from localspec.server.errors import translate
from localspec.server.refused import INFILL
from localspec.server.shapes import TokenLogprob


class ExtraChunk(BaseModel):
    """One file of ``input_extra``."""

    model_config = ConfigDict(extra="allow", strict=True)
    filename: Annotated[str, said('an input_extra chunk\'s "filename" must be a string')] = "tmp"
    text: Annotated[str, said('an input_extra chunk must contain a "text" field with a string value')]

    @model_validator(mode="before")
    @classmethod
    def _an_object(cls, value: Any) -> Any:
        if not isinstance(value, dict):
            raise user_error('input_extra must be an array of {"filename": string, "text": string}')
        return {"text": None, **value}


def _extra_array(value: Any) -> Any:
    if value is not None and not isinstance(value, list):
        raise user_error('input_extra must be an array of {"filename": string, "text": string}')
    return value


class InfillBody(SamplingBody):
    """``POST /infill``: llama.cpp's request body (see the module docstring)."""

    endpoint: ClassVar[str] = INFILL
    absent_as_null: ClassVar[tuple[str, ...]] = ("input_prefix", "input_suffix")

    input_prefix: Annotated[str, said('"input_prefix" is required: a string, the text before the cursor')]
    input_suffix: Annotated[str, said('"input_suffix" is required: a string, the text after the cursor')]
    input_extra: Annotated[list[ExtraChunk] | None, BeforeValidator(_extra_array)] = None
    prompt: Annotated[str, said('"prompt" must be a string')] = ""
    n_predict: int | None = Field(None, ge=-1, description="most tokens to generate; -1: no limit but the context; "
                                                           "0: only cache the prompt")
    stop: list[str] | None = Field(None, description="stop strings, not empty")
    stream: bool = False
    cache_prompt: bool = Field(True, description="false: this request neither reuses a cached prompt prefix nor "
                                                 "leaves its own in the cache (as on the OpenAI endpoints)")
    response_fields: list[str] | None = None
    n_indent: int = Field(0, ge=0, le=2**31 - 1, description="characters: the output ends before a line, after its "
                                                             "first newline, indented less (0: off)")
    t_max_predict_ms: int = Field(-1, ge=-1, le=2**63 - 1, description="milliseconds after the first token; then the "
                                                                      "output ends at the next newline (<= 0: off)")

    @field_validator("seed", mode="before")
    @classmethod
    def _random_seed(cls, v: Any) -> Any:
        return None if v == -1 else v  # llama.cpp's "random"

    def own_fields(self) -> dict[str, Any]:
        """A completion whose prompt is the FIM prompt (``fim``)."""
        n = self.n_predict
        return {"kind": "completion", "prompt": self.input_prefix, "stream": self.stream,
                "max_tokens": None if n is None or n < 0 else max(n, 1),  # n_predict 0: one token, not sent
                "generation": {"min_indent": self.n_indent, "newline_time_limit": self.t_max_predict_ms / 1000
                               if self.t_max_predict_ms > 0 else None},
                "fim": FimInput(self.input_prefix, self.input_suffix,
                                tuple((c.filename, c.text) for c in self.input_extra or ()), self.prompt)}


def check_fim_model(engine, model: str, param: str) -> None:
    """Raises ApiError 400 ``fim_unsupported`` (naming ``param``) when the engine's target has no
    FIM prefix, suffix or middle token; the message says so and names a model that has them."""
    try:
        check_fim(engine.fim_tokens(), model)
    except ConfigError as e:
        raise translate(e, param, "fim_unsupported") from None


def fim_prompt_tokens(engine, req: GenerationRequest, n_predict: int | None = None) -> list[int]:
    """The token ids of ``req.fim`` for ``engine``'s target (call in the thread that owns the engine),
    as llama.cpp's server builds them: :func:`localspec.app.fim.fim_prompt` with the engine's
    context size; every user text (prefix, suffix, extra files and the typed middle) tokenized as plain
    text, so special-token text a user typed stays text (llama.cpp parses it in the typed middle; we do not).

    Args:
        n_predict: the server's default output length (``--max-tokens``, llama-server's ``-n``),
            which sizes the extra context as llama.cpp does; None: none (-1).

    Raises:
        ConfigError: the target has no FIM tokens.
    """
    return fim_prompt(engine.fim_tokens(), lambda t: engine.tokenize(t, special=False), req.fim,
                      bos=engine.bos_token(), n_ctx=engine.n_ctx, n_predict=-1 if n_predict is None else n_predict,
                      model="the served model")


#: EndReason value -> llama.cpp's stop_type
STOP_TYPES = {"eog": "eos", "stop": "word", "max_tokens": "limit", "context": "limit", "cancelled": "limit",
              "indent": "limit", "time_limit": "limit"}


def answer_draft_counts(rounds, n_answer: int) -> tuple[int, int]:
    """``timings``' ``(draft_n, draft_n_accepted)``: the rounds' drafted and accepted tokens, counted
    only for positions of the answer's first ``n_answer`` tokens (``tokens_predicted``).

    A round drafts positions ``start .. start + drafted - 1`` and commits ``accepted + 1`` tokens (its
    accepted draft, then the target's own token). Where the answer ends at or before that own token
    (a stop string, ``n_predict`` or an end-of-generation token inside an accepted draft), the draft
    tokens past the answer's end were cut, not given: only the ``n_answer - start`` in it count (all
    accepted). Other rounds count whole (drafts rejected are drafted tokens too). So
    ``draft_n_accepted <= tokens_predicted``, and a 0-token answer counts no draft.

    Args:
        rounds: the generation's :class:`~localspec.core.events.RoundStats`, in order.
        n_answer: tokens in the answer (an end-of-generation token counted, as ``tokens_predicted``).
    """
    drafted = accepted = start = 0
    for r in rounds:
        if start + r.accepted < n_answer:
            drafted, accepted = drafted + r.drafted, accepted + r.accepted
        else:
            kept = max(0, n_answer - start)
            drafted, accepted = drafted + kept, accepted + kept
        start += r.committed
    return drafted, accepted


def pick_fields(obj: dict, paths: list[str]) -> dict:
    """llama.cpp's ``response_fields``: ``{path: value}`` for each ``a/b`` path present in ``obj``."""
    out = {}
    for path in paths:
        value: Any = obj
        for key in path.split("/"):
            if not isinstance(value, dict) or key not in value:
                break
            value = value[key]
        else:
            out[path] = value
    return out


@dataclass
class InfillShape:
    """Builds llama.cpp's /infill answers; the app's generation path calls it as it calls
    :class:`~localspec.server.shapes.ResponseShape` (``complete``, ``chunk``)."""

    model: str
    prompt_tokens: int
    discard: bool = False  #: n_predict 0: the prompt was cached, the one token generated is not sent
    #: the output could run to the end of the context window (:attr:`~localspec.server.worker.Started.context_limit`)
    context_limit: bool = False
    response_fields: list[str] | None = None
    done_event: ClassVar[bool] = False  #: no ``data: [DONE]`` at the end of a stream
    kind: ClassVar[str] = "infill"
    _sent: int = 0
    _generation: Any = None

    def finished(self, gen) -> None:
        """The finished generation, whose statistics the final object reports."""
        self._generation = gen

    def _final(self, content: str, extra: dict) -> dict:
        st = self._generation.stats
        reason = st.end_reason.value if st.end_reason else "eog"
        # llama.cpp counts the end-of-generation token it sampled among the predicted ones (n_decoded)
        n_gen = 0 if self.discard else st.tokens + (st.end_reason is not None and reason == "eog")
        prompt_n = st.prompt_tokens - st.cached_prompt_tokens
        prompt_ms = st.prefill_seconds * 1000
        predicted_ms = max(0.0, st.elapsed_seconds - st.prefill_seconds) * 1000
        timings = {"cache_n": st.cached_prompt_tokens, "prompt_n": prompt_n, "prompt_ms": prompt_ms,
                   "prompt_per_token_ms": prompt_ms / prompt_n if prompt_n else 0.0,
                   "prompt_per_second": prompt_n / prompt_ms * 1000 if prompt_ms else 0.0,
                   "predicted_n": n_gen, "predicted_ms": predicted_ms,
                   "predicted_per_token_ms": predicted_ms / n_gen if n_gen else 0.0,
                   "predicted_per_second": n_gen / predicted_ms * 1000 if predicted_ms else 0.0}
        timings["draft_n"], timings["draft_n_accepted"] = answer_draft_counts(self._generation.rounds, n_gen)
        obj = {"index": 0, "content": "" if self.discard else content, "tokens": [], "id_slot": 0, "stop": True,
               "model": self.model, "tokens_predicted": n_gen, "tokens_evaluated": st.prompt_tokens,
               "prompt": "", "has_new_line": "\n" in content,
               "truncated": self.context_limit and reason in ("max_tokens", "context"),
               "stop_type": STOP_TYPES.get(reason, "none"), "stopping_word": self._generation.stop_word or "",
               "tokens_cached": st.cached_prompt_tokens, "timings": timings,
               "speculation": extra.get("speculation")}
        return pick_fields(obj, self.response_fields) if self.response_fields else obj

    def complete(self, text: str, finish_reason: str, extra: dict,
                 logprobs: list[TokenLogprob] | None = None) -> dict:
        """The non-streamed answer."""
        return self._final(text, extra)

    def chunk(self, text: str | None, finish_reason: str | None = None, tokens=None, first: bool = False,
              include_usage: bool = False, extra: dict | None = None, logprobs=None) -> dict | None:
        """A streamed event: None for the opening one (llama.cpp sends none), the final object
        when ``finish_reason`` is given, else the round's text and token ids."""
        if first:
            return None
        if finish_reason is not None:
            return self._final("", extra or {})
        if self.discard:
            return None
        self._sent += len(tokens or ())
        return {"index": 0, "content": text or "", "tokens": [t.token_id for t in tokens or ()], "stop": False,
                "id_slot": 0, "tokens_predicted": self._sent, "tokens_evaluated": self.prompt_tokens}
