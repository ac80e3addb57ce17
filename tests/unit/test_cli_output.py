"""``localspec generate``'s output, as pure functions: the --json lines and the legend."""

import json

from localspec.cli import KIND_STYLES, _json_line, _legend
from localspec.core.events import DrafterId, RoundStats, TokenEvent, TokenKind
from localspec.tui.kinds import LOOKS


def test_a_token_and_a_round_as_json_lines():
    line = _json_line(TokenEvent(42, "é", TokenKind.BONUS, round=3, position=7))
    assert '"text": "é"' in line  # the text as written, not escaped
    token = json.loads(line)
    assert token == {"type": "token", "id": 42, "text": "é", "kind": "bonus", "round": 3, "position": 7}
    rs = RoundStats(round=3, drafter=DrafterId.LOOKUP, draft_tokens=(5, 6), target_tokens=(5, 9), drafted=2,
                    accepted=1, committed=2, draft_seconds=0.25, verify_seconds=0.5, draft_len_chosen=4,
                    reason="fixed", round_seconds=0.875, pass_seconds=0.625)
    assert json.loads(_json_line(rs)) == {
        "type": "round", "round": 3, "drafter": "lookup", "drafted": 2, "accepted": 1, "committed": 2,
        "draft_tokens": [5, 6], "target_tokens": [5, 9], "draft_seconds": 0.25, "verify_seconds": 0.5,
        "draft_len_chosen": 4, "reason": "fixed", "round_seconds": 0.875, "pass_seconds": 0.625}


def test_the_legend_names_every_token_kind_in_its_style():
    legend = _legend()
    assert legend.plain == "legend: " + "".join(f"{LOOKS[k].label}  " for k in TokenKind)
    styles = {legend.plain[s.start:s.end]: s.style for s in legend.spans}
    assert styles == {LOOKS[k].label: KIND_STYLES[k.value] or "default" for k in TokenKind}
