"""The recorded acceptance traces and measured cost curves under ``tests/data``, for replay tests.

``tests/data/traces/<name>.json``: greedy generations written by ``scripts/record_traces.py`` (the
prompt, the prediction and the answer as token ids; see that script's docstring). ``tests/data/cpu-curves``:
cost-cache files of ``localspec calibrate`` on the CPU kinds the project has met, named
``<cpu-prefix>_<model-file-stem>_ctxN_tT.json`` (see its README). No test functions here; import it
by its bare name (``from traces import load_trace``) as the other helpers.
"""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from localspec.backend.calibration import ModelCosts

DATA = Path(__file__).resolve().parent / "data"
TRACES = DATA / "traces"
CURVES = DATA / "cpu-curves"
#: ``<cpu-prefix>_<model-file-stem>_ctxN_tT.json``; the model stem may hold underscores and dots
_CURVE_NAME = re.compile(r"^(?P<cpu>[^_]+)_(?P<model>.+)_ctx(?P<ctx>\d+)_t(?P<threads>\d+)\.json$")


@dataclass(frozen=True)
class Trace:
    """One recorded greedy generation.

    Attributes:
        name: the file's stem (``code-edit``, ``tiny-code-edit``...).
        prompt: the prompt's token ids (the chat template applied).
        prediction: the predicted output's token ids (the original file, tokenized as plain text).
        answer: the answer's token ids, without the end-of-generation token.
        eog: the token id that ended the answer, or None.
        meta: every other field of the file (task, target, draft, n_ctx, greedy_mode_none_equal...).
    """

    name: str
    prompt: tuple[int, ...]
    prediction: tuple[int, ...]
    answer: tuple[int, ...]
    eog: int | None = None
    meta: dict = field(default_factory=dict, compare=False, hash=False)

    @property
    def target(self) -> str:
        return str(self.meta.get("target", ""))


def trace_names() -> list[str]:
    """The recorded traces' names, sorted."""
    return sorted(p.stem for p in TRACES.glob("*.json"))


def load_trace(name: str) -> Trace:
    """``tests/data/traces/<name>.json`` as a :class:`Trace`."""
    d = json.loads((TRACES / f"{name}.json").read_text())
    ids = {k: tuple(int(t) for t in d.pop(k)) for k in ("prompt", "prediction", "answer")}
    eog = d.pop("eog", None)
    return Trace(name, ids["prompt"], ids["prediction"], ids["answer"], None if eog is None else int(eog), d)


def load_curve(file: str | Path) -> ModelCosts:
    """A cost-cache file (a path, or a name in ``tests/data/cpu-curves``) as :class:`ModelCosts`,
    with calibration's own reader (:meth:`ModelCosts.from_json`, as :func:`~localspec.backend.calibration.load_costs`)."""
    path = Path(file)
    if not path.is_absolute() and not path.exists():
        path = CURVES / path
    return ModelCosts.from_json(json.loads(path.read_text()))


def curve_files() -> list[Path]:
    """The cost-cache files in ``tests/data/cpu-curves``, sorted."""
    return sorted(p for p in CURVES.glob("*.json") if _CURVE_NAME.match(p.name))


def recorded_curves() -> list[tuple[str, str, ModelCosts]]:
    """(cpu prefix, model file stem, costs) of every file in ``tests/data/cpu-curves``, sorted by file name."""
    out = []
    for p in curve_files():
        m = _CURVE_NAME.match(p.name)
        out.append((m["cpu"], m["model"], load_curve(p)))
    return out


#: the ways a policy's curve can be off from the one a replay charges (:func:`off_curve`)
OFF_KINDS = ("scale", "slope")


def off_curve(costs: ModelCosts, kind: str, factor: float) -> ModelCosts:
    """``costs`` off by ``factor``, for a policy that believes a wrong curve while a replay charges the true one.

    ``scale``: every T(b) times ``factor`` (the machine slower or faster than calibrated throughout);
    ``slope``: T(1) kept, the cost of the tokens beyond the first times ``factor``,
    T(1) + factor (T(b) - T(1)) (drafting looks cheaper or dearer than it is). Every context's curve
    alike; the measured points are dropped (made again from the curves).
    """
    if kind not in OFF_KINDS:
        raise ValueError(f"kind {kind!r}: one of {', '.join(OFF_KINDS)}")

    def off(curve: list[float]) -> list[float]:
        return [t * factor for t in curve] if kind == "scale" else [curve[0] + factor * (t - curve[0]) for t in curve]

    return dataclasses.replace(costs, seconds=off(costs.seconds), curves=[off(c) for c in costs.curves],
                               point_seconds=[])
