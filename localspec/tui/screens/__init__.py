"""The three screens (app modes), one module each: chat, code-edit, race; what they share in base."""

from localspec.tui.screens.base import AssistantMessage, GenerationScreen, LoadBar, UserMessage
from localspec.tui.screens.chat import ChatScreen
from localspec.tui.screens.edit import DiffView, EditScreen
from localspec.tui.screens.race import RacePane, RaceScreen, race_verdict

__all__ = ["AssistantMessage", "GenerationScreen", "LoadBar", "UserMessage", "ChatScreen", "DiffView", "EditScreen",
           "RacePane", "RaceScreen", "race_verdict"]
