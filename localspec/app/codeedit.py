"""Code edit: ask the model to rewrite a file, take the file out of its answer, check it, save it.

Why these hold together: the steps below are one round trip of one file (its form kept aside, the
prompt, the block taken out of the answer, the checks, the save in the same form); each step reads
what the one before it kept.

What the code-edit screen of the TUI (and later the server) uses; nothing here imports
llama_cpp or Textual, and every function but the two savers is pure.

1. :func:`file_form` splits what a file *says* from how it is *written*: the model sees
   the text without a byte-order mark and with LF line ends (:attr:`FileForm.text`);
   the BOM, the line end of every line and the final-newline state are kept aside.
2. :func:`edit_prompt` asks for the whole file in one fenced block, the file shown in
   a fence longer than any fence inside it (CommonMark 0.31, section 4.5).
3. :func:`extract_block` finds the *outer* fenced block of the answer: a closing fence
   is at least as long as the opening one and of the same character, and where the
   file itself holds fences that could close it, the candidate whose inner fences
   pair up like the original's is taken (not the first one, which would cut the file).
4. :func:`apply_answer` puts the file back into the original's form (BOM, each
   unchanged line's own line end, the dominant line end for new lines, the final
   newline) and checks that the answer is a whole file: why it is not
   (:attr:`EditResult.incomplete`: cut at max_tokens or by the context, stopped, no
   closing fence) and what deserves a second look (:attr:`EditResult.warnings`: much
   shorter than the original, Python that no longer parses, no code block).
5. :func:`save_new` writes ``name.edited.ext``; :func:`replace_file` backs the original
   up and replaces it atomically, refusing an incomplete answer and a file changed on
   disk since it was read. Both go through :mod:`localspec.app.fileio`.
"""

from __future__ import annotations

import ast
import difflib
import os
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from localspec.errors import LocalspecError
from localspec.app.fileio import FileError, atomic_write_text, expand_path, free_name, read_text_file, replace_with_backup

BOM = "\ufeff"

#: one line and its end: "\r\n", "\n", a lone "\r", or "" for a last line without one
_LINE = re.compile(r"([^\r\n]*)(\r\n|\n|\r|$)")
#: a fence line (CommonMark 4.5): up to 3 spaces, then 3+ backticks or tildes, then the info string
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")

LANGS = {".py": "python", ".pyi": "python", ".js": "javascript", ".ts": "typescript", ".rs": "rust", ".go": "go",
         ".c": "c", ".h": "c", ".cpp": "cpp", ".java": "java", ".sh": "bash", ".md": "markdown",
         ".rst": "rst", ".toml": "toml", ".json": "json", ".yaml": "yaml", ".yml": "yaml", ".rb": "ruby",
         ".html": "html", ".css": "css"}

#: a line standing in for code the model left out ("# ... rest of the file unchanged")
_PLACEHOLDER = re.compile(r"(\.\.\.|…).*\b(rest|remaining|remainder|unchanged|same as before|existing)\b|"
                          r"\b(rest|remainder) of (the )?(file|code|module|class|function)\b", re.I)

#: an answer whose file has fewer than this fraction of the original's characters is flagged
SHORT_FRACTION = 0.5
#: ... when the original has at least this many characters (tiny files change size a lot)
SHORT_MIN_CHARS = 200


def split_lines(text: str) -> list[tuple[str, str]]:
    """``text`` as (line, line end) pairs; the last line's end is "" when it has none.

    Every line end kind counts ("\\r\\n", "\\n", a lone "\\r"); joining the pairs
    gives ``text`` back. An empty text has no lines.
    """
    if not text:
        return []
    out = []
    for m in _LINE.finditer(text):
        if m.start() == len(text) and not m.group(0):
            break
        out.append((m.group(1), m.group(2)))
    return out


@dataclass(frozen=True)
class FileForm:
    """How a text file writes what it says.

    Attributes:
        text: the content as the model sees it: no BOM, every line end "\\n", and a
            final "\\n" only when the file has one.
        bom: the file starts with U+FEFF (the UTF-8 byte-order mark).
        endings: the line end of each line of ``text`` in the file ("" for a last line
            without one).
        newline: the file's most common line end ("\\n" for a file without any); new
            lines get it.
        final_newline: the file ends with a line end (True for an empty file).
    """

    text: str
    bom: bool
    endings: tuple[str, ...]
    newline: str
    final_newline: bool

    @property
    def lines(self) -> list[str]:
        return self.text.split("\n")[: len(self.endings)]


def file_form(original: str) -> FileForm:
    """Split ``original`` (a file's decoded text) into its content and its form."""
    bom = original.startswith(BOM)
    body = original[1:] if bom else original
    pairs = split_lines(body)
    endings = tuple(e for _, e in pairs)
    counts = Counter(e for e in endings if e)
    newline = max(counts, key=lambda e: (counts[e], e == "\n")) if counts else "\n"
    final = not pairs or bool(endings[-1])
    text = "\n".join(line for line, _ in pairs) + ("\n" if pairs and final else "")
    return FileForm(text, bom, endings, newline, final)


def to_lf(text: str) -> str:
    """Every line end ("\\r\\n", lone "\\r") as "\\n"."""
    return text.replace("\r\n", "\n").replace("\r", "\n")


def restore_form(new_text: str, form: FileForm) -> str:
    """``new_text`` (the model's file, any line ends) written the way the original was.

    ``new_text`` holds the lines without the newline after the last one (a block body).
    Lines equal to an original line (matched with :class:`difflib.SequenceMatcher`,
    in order) keep that line's own end; new and changed lines get the file's most
    common end; the BOM and the final-newline state are the original's. So a diff of
    the bytes shows only the lines the edit changed, also in a file of mixed ends.
    """
    body = to_lf(new_text).lstrip(BOM)
    new_lines = body.split("\n") if body else []
    old_lines = form.lines
    ends = [form.newline] * len(new_lines)
    sm = difflib.SequenceMatcher(None, old_lines, new_lines, autojunk=False)
    for tag, i1, i2, j1, _j2 in sm.get_opcodes():
        if tag == "equal":
            for k in range(i2 - i1):
                ends[j1 + k] = form.endings[i1 + k] or form.newline
    if new_lines:
        ends[-1] = ends[-1] if form.final_newline else ""
    out = "".join(line + end for line, end in zip(new_lines, ends))
    return (BOM if form.bom else "") + out


def _fence_of(line: str) -> tuple[str, int, str] | None:
    """(fence char, fence length, info string) of a fence line, else None."""
    m = _FENCE.match(line)
    if m is None:
        return None
    fence, info = m.group(1), m.group(2).strip()
    if fence[0] == "`" and "`" in info:
        return None  # CommonMark: a backtick fence's info string has no backtick
    return fence[0], len(fence), info


def _closes(line: str, char: str, length: int) -> bool:
    f = _fence_of(line)
    return f is not None and f[0] == char and f[1] >= length and not f[2]


def scan_fences(lines: list[str]) -> tuple[int, bool]:
    """CommonMark's fenced blocks in ``lines``: (number of fence lines, every block closed)."""
    n, open_ = 0, None
    for line in lines:
        f = _fence_of(line)
        if f is None:
            continue
        if open_ is None:
            open_, n = f, n + 1
        elif _closes(line, open_[0], open_[1]):
            open_, n = None, n + 1
    return n, open_ is None


def longest_fence(text: str) -> int:
    """The longest run of backticks opening a line (after up to 3 spaces), 0 if none."""
    return max((len(m.group(1)) for m in re.finditer(r"(?m)^ {0,3}(`{3,})", text)), default=0)


@dataclass(frozen=True)
class Block:
    """The outer fenced block of an answer.

    Attributes:
        body: the text between the fences, LF line ends, without the newline before
            the closing fence (to the end of the answer when unclosed; the whole answer
            when it has no fence).
        fenced: the answer has an opening fence.
        closed: the block has its closing fence.
        fence: the opening fence ("```", "````", "~~~"...; "" without one).
    """

    body: str
    fenced: bool
    closed: bool
    fence: str = ""


def extract_block(answer: str, original: str = "") -> Block:
    """The outer fenced code block of ``answer`` (CommonMark fences, any line ends).

    The block opens at the first fence line. Its closing fence is a line of the same
    character, at least as long, with nothing after it (CommonMark 0.31, 4.5). When
    several lines qualify (the file itself holds fences, and the model used a fence
    no longer than them), the one chosen leaves a body whose fences pair up as the
    original's do (same number of fence lines, same open/closed state), the earliest
    on a tie; with no such line the first qualifying one (CommonMark's rule). A block
    with no such line may still be closed by a *shorter* bare fence of its character
    (a model's slip: ````markdown ... ```) when the body before it pairs its fences
    exactly as the original does; otherwise it is unclosed.

    Args:
        answer: the model's answer.
        original: the file's content as sent to the model (used only to disambiguate).
    """
    lines = to_lf(answer).split("\n")
    start = next((i for i, line in enumerate(lines) if _fence_of(line)), None)
    if start is None:
        return Block(to_lf(answer).strip("\n"), fenced=False, closed=False)
    char, length, _ = _fence_of(lines[start])
    fence = char * length
    candidates = [j for j in range(start + 1, len(lines)) if _closes(lines[j], char, length)]
    want_n, want_closed = scan_fences(to_lf(original).split("\n"))

    def best(cands: list[int]) -> tuple[tuple[bool, int], int]:
        """(score, line) of the best closing candidate: (closed state differs, fence-count gap)."""
        scored = []
        for j in cands:
            n, closed = scan_fences(lines[start + 1:j])
            scored.append(((closed != want_closed, abs(n - want_n)), j))
        return min(scored, key=lambda s: s[0])  # the earliest on a tie (min keeps the first)

    if candidates:
        score, end = best(candidates)
        end = end if not score[0] or len(candidates) == 1 else candidates[0]
        return Block("\n".join(lines[start + 1:end]), fenced=True, closed=True, fence=fence)
    # Models asked for a long fence sometimes close it with a shorter one (````markdown ... ```):
    # take a bare fence of the same character as the close when the body before it pairs
    # its fences as the original does.
    loose = [j for j in range(start + 1, len(lines)) if _closes(lines[j], char, 3)]
    if loose:
        score, end = best(loose)
        if score == (False, 0):
            return Block("\n".join(lines[start + 1:end]), fenced=True, closed=True, fence=fence)
    rest = lines[start + 1:]
    if rest and rest[-1] == "":
        rest = rest[:-1]  # the answer's last newline
    return Block("\n".join(rest), fenced=True, closed=False, fence=fence)


def edit_prompt(path: str | os.PathLike, original: str, instruction: str) -> str:
    """The chat message of a code edit: the instruction and the file in one fenced block.

    The file is shown without its BOM and with LF line ends; its fence is longer than
    any backtick fence inside it, so the block cannot end early, and the model is
    asked to answer with the same fence.
    """
    path = Path(path)
    text = file_form(original).text
    fence = "`" * max(3, longest_fence(text) + 1)
    lang = LANGS.get(path.suffix.lower(), "")
    body = text if text.endswith("\n") or not text else text + "\n"
    return (f"Rewrite the file below according to the instruction. Output the whole rewritten file "
            f"in one fenced code block opened with {fence}{lang} and closed with {fence}, and nothing else.\n\n"
            f"Instruction: {instruction.strip()}\n\n"
            f"File `{path.name}`:\n{fence}{lang}\n{body}{fence}")


def edit_max_tokens(n_prompt: int, max_tokens: int) -> int:
    """Tokens a whole-file answer may take: room for the file twice over (the prompt
    holds it once), at least ``max_tokens``. Not bounded by the context window: an
    answer that fills it ends with end reason ``context``, which says why."""
    return max(max_tokens, 2 * n_prompt + 256)


def continuation_prefix(events) -> list[int]:
    """The answer's token ids to continue from: all but a trailing run of tokens that
    showed no text (the bytes of a character max_tokens cut, which the stream never
    showed; generating them again completes it).

    Args:
        events: the answer's token events in order (anything with ``token_id`` and ``text``).
    """
    ids = [e.token_id for e in events]
    n = len(ids)
    while n and events[n - 1].text == "":
        n -= 1
    return ids[:n]


def unified_diff(original: str, new: str, name: str) -> str:
    """A unified diff of two texts, line ends included (a changed line end is a change)."""
    return "".join(difflib.unified_diff(original.splitlines(keepends=True), new.splitlines(keepends=True),
                                        fromfile=f"a/{name}", tofile=f"b/{name}"))


def diff_counts(diff: str) -> tuple[int, int]:
    """(lines added, lines removed) of a unified diff."""
    lines = diff.splitlines()
    added = sum(1 for ln in lines if ln.startswith("+") and not ln.startswith("+++"))
    removed = sum(1 for ln in lines if ln.startswith("-") and not ln.startswith("---"))
    return added, removed


def _python_error(text: str) -> str | None:
    try:
        ast.parse(text)
    except SyntaxError as e:
        return f"line {e.lineno}: {e.msg}"
    except ValueError as e:  # e.g. NUL bytes
        return str(e)
    return None


def undefined_names(text: str, name: str = "file.py") -> dict[str, int]:
    """Names ``text`` (Python source that parses) uses without defining them, as pyflakes
    reports them (undefined names, locals used before assignment, ``__all__`` entries):
    name -> first line."""
    from pyflakes import checker, messages

    kinds = (messages.UndefinedName, messages.UndefinedLocal, messages.UndefinedExport)
    found: dict[str, int] = {}
    for m in checker.Checker(ast.parse(text), filename=name).messages:
        if isinstance(m, kinds):
            found.setdefault(str(m.message_args[0]), m.lineno)
    return found


def new_undefined_names(original: str, result: str, name: str = "file.py") -> list[tuple[str, int]]:
    """The names the result uses without defining them that the original did not already
    (a variable or import the model dropped: the file still parses, the code raises
    NameError). Both texts must parse. Returns (name, first line in the result), by line."""
    before = undefined_names(original, name)
    after = undefined_names(result, name)
    return sorted(((n, line) for n, line in after.items() if n not in before), key=lambda x: (x[1], x[0]))


@dataclass(frozen=True)
class EditResult:
    """What an answer makes of the file.

    Attributes:
        text: the rewritten file, in the original's form (BOM, line ends, final newline).
        diff: unified diff original -> text.
        block: the block it was taken from.
        incomplete: why the answer is not a whole file (empty when it is); such a result
            is never written over the original (:func:`replace_file` refuses it).
        warnings: why the result deserves a look before replacing the original.
        partial: the warnings that say the file may be only partly there (much shorter
            than the original, or "rest of the file unchanged" placeholders): the edit
            screen asks about them as soon as the answer ends.
        can_continue: generating more could complete it (it was cut by max_tokens or stopped).
    """

    text: str
    diff: str
    block: Block
    incomplete: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    can_continue: bool = False
    partial: tuple[str, ...] = ()

    @property
    def problems(self) -> tuple[str, ...]:
        return self.incomplete + self.warnings

    @property
    def complete(self) -> bool:
        return not self.incomplete

    @property
    def changed(self) -> bool:
        return bool(self.diff)


def apply_answer(original: str, answer: str, *, name: str = "file", end_reason: str | None = None,
                 tokens: int | None = None, n_ctx: int | None = None) -> EditResult:
    """Take the rewritten file out of ``answer`` and check that it is whole.

    Args:
        original: the file's text as read (BOM and line ends included).
        answer: the model's whole answer (all continuations joined).
        name: the file's name, for the diff and the Python check (``.py``/``.pyi``).
        end_reason: why the (last part of the) answer ended: "eog", "stop",
            "max_tokens", "context", "cancelled" (an :class:`EndReason` value) or None.
        tokens: answer length in tokens, for the messages.
        n_ctx: the context window, for the messages.

    Returns:
        the :class:`EditResult`.
    """
    form = file_form(original)
    block = extract_block(answer, form.text)
    text = restore_form(block.body, form)
    end = getattr(end_reason, "value", end_reason)
    incomplete: list[str] = []
    warnings: list[str] = []
    can_continue = False
    if not block.closed:
        count = f" ({tokens} token{'' if tokens == 1 else 's'})" if tokens is not None else ""
        if end == "max_tokens":
            incomplete.append(f"the answer ended at max_tokens{count} before the file was complete")
            can_continue = True
        elif end == "context":
            window = f" of {n_ctx} tokens" if n_ctx else ""
            incomplete.append(f"the answer filled the context window{window} before the file was complete "
                              "(raise n_ctx to edit this file)")
        elif end == "cancelled":
            incomplete.append(f"the answer was stopped{count} before the file was complete")
            can_continue = True
        elif block.fenced:
            incomplete.append(f"the answer has no closing fence ({block.fence}): the file may be cut")
        else:
            warnings.append("the answer has no fenced code block: the whole answer was taken as the file")
    partial: list[str] = []
    core_old, core_new = form.text.strip(), to_lf(text).lstrip(BOM).strip()
    if len(core_old) >= SHORT_MIN_CHARS and len(core_new) < SHORT_FRACTION * len(core_old):
        partial.append(f"the result is much shorter than the original ({len(core_new)} vs {len(core_old)} "
                       "characters): check that nothing was dropped")
    new_placeholders = [ln.strip() for ln in core_new.split("\n")
                        if (m := _PLACEHOLDER.search(ln)) and m.group(0) not in core_old]
    if new_placeholders:
        partial.append(f"the result has a placeholder instead of code ({new_placeholders[0][:60]!r})")
    warnings += partial
    if Path(name).suffix.lower() in (".py", ".pyi") and _python_error(form.text) is None:
        err = _python_error(to_lf(text).lstrip(BOM))
        if err is not None:
            warnings.append(f"the original parses as Python but the result does not ({err})")
        elif lost := new_undefined_names(form.text, to_lf(text).lstrip(BOM), name):
            warnings.append("the result uses names it no longer defines: "
                            + ", ".join(f"{n} (line {line})" for n, line in lost))
    return EditResult(text, unified_diff(original, text, name), block, tuple(incomplete), tuple(warnings),
                      can_continue, tuple(partial))


def edited_path(path: Path) -> Path:
    """``name.edited.ext``, or ``name.edited-2.ext`` ... when taken."""
    return free_name(path, f"{path.stem}.edited{path.suffix}", lambda n: f"{path.stem}.edited-{n + 1}{path.suffix}")


def save_new(path: str | os.PathLike, result: EditResult) -> Path:
    """Write the result beside the original as ``name.edited.ext`` (atomically); the
    original is not touched. Works for incomplete results too. Raises FileError."""
    return atomic_write_text(edited_path(expand_path(path)), result.text)


class IncompleteEditError(LocalspecError):
    """The answer is not a whole file; the original was not touched."""

    exit_code = 2


def replace_file(path: str | os.PathLike, original: str, result: EditResult) -> Path:
    """Back up ``path`` and replace it atomically with the result.

    Args:
        original: the text the edit started from; the file must still hold it.

    Returns:
        the backup's path (``name.bak`` or ``name.bak-<time>``).

    Raises:
        IncompleteEditError: the result is incomplete (its reasons in the message).
        FileError: the file changed on disk since it was read, or a read/write failed;
            the original is then unchanged.
    """
    path = expand_path(path)
    if result.incomplete:
        raise IncompleteEditError(f"not replacing {path.name}: {'; '.join(result.incomplete)}",
                                  "keep it as a new file, or continue the answer")
    current = read_text_file(path)
    if current != original:
        raise FileError(f"{path} changed on disk since it was opened; not replacing it",
                        "reopen the file and run the instruction again, or keep the result as a new file")
    return replace_with_backup(path, result.text)
