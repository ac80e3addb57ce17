"""What every front-end shares: the jobs and their inputs.

The model catalog (:mod:`.catalog`, with ``catalog.toml``), loading an engine from settings
(:mod:`.loader`), the command-line flags built from the option registry (:mod:`.flags`), the
user's settings file (:mod:`.settings_file`), a chat session (:mod:`.chat`) and its messages
file (:mod:`.conversation`), the code-edit job (:mod:`.codeedit`), reading and writing
the user's files safely (:mod:`.fileio`), and who goes first in a side-by-side timing
(:mod:`.run_order`).
"""
