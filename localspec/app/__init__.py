"""What every front-end shares: the jobs and their inputs.

The model catalog (:mod:`.catalog`, with ``catalog.toml``), loading an engine from settings
(:mod:`.loader`), the command-line flags built from the option registry (:mod:`.flags`), the
user's settings file (:mod:`.settings_file`), a chat session (:mod:`.chat`) and its messages
file (:mod:`.conversation`), one generate run's input read in one call (:mod:`.prompt_input`),
the code-edit job (:mod:`.codeedit`), reading and writing the user's files safely
(:mod:`.fileio`), a fill-in-the-middle prompt (:mod:`.fim`), and who goes first in a
side-by-side timing (:mod:`.run_order`).
"""
