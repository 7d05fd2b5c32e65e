"""The child side of ``traceinspect capture``: the user's script run with step hooks and tracing.

The runner starts ``python [flags] .../_child/__main__.py CONFIG.json`` (:data:`ENTRY`) with the
user's interpreter, where traceinspect may not be importable and must not be imported (its
``__init__`` may pull in pandas). So every module here imports only the standard library and
its siblings; the entry file loads them as a package of its own. jax and grain are patched when
the *script* imports them, through a post-import hook, so that a script that sets
``JAX_PLATFORMS`` or ``XLA_FLAGS`` before ``import jax`` behaves exactly as without us.

By job: ``_base`` (what all share), ``window`` (steps, the steady-state rule), ``tracing``
(the profiler around the window, the time window), ``report`` (the report), ``facts`` (the
machine and the libraries), ``hooks`` (the post-import hook), ``jax_patches`` and
``grain_patches`` (what changes in each), ``grain_probe`` (the Grain stage timer and worker
probe, sent by value into Grain's processes), ``grain_hints`` (hints on Grain's errors),
``run`` (running the script as ``__main__``).
"""

from __future__ import annotations

import pathlib

#: The file the runner executes by path, with the user's interpreter.
ENTRY = str(pathlib.Path(__file__).with_name("__main__.py"))
