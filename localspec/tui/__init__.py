"""localspec's Textual app: chat with a live coloured token stream, statistics, a round
inspector, code-edit mode and race mode. Entry point: :func:`localspec.tui.app.run_app`."""
