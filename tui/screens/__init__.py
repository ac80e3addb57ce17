"""The three screens (app modes), one module each: chat, code-edit, race; what they share in base."""

from .base import AssistantMessage, GenerationScreen, LoadBar, UserMessage
from .chat import ChatScreen
from .edit import DiffView, EditScreen
from .race import RacePane, RaceScreen, race_verdict

__all__ = ["AssistantMessage", "GenerationScreen", "LoadBar", "UserMessage", "ChatScreen", "DiffView", "EditScreen",
           "RacePane", "RaceScreen", "race_verdict"]
