"""The three phases of ``traceinspect isolate``: their names and the words for them."""

from __future__ import annotations

TARGET, LOADER, REAL = "target", "loader", "real"
PHASES = (TARGET, LOADER, REAL)
DESCRIPTIONS = {
    TARGET: "target step (the first batch repeated: no input cost)",
    LOADER: "loader alone (the first Grain iterator drained, no training)",
    REAL: "real step (the script as it is)",
}
#: Each phase's figure, in words.
PHASE_NAMES = {TARGET: "target step", LOADER: "loader batch", REAL: "real step"}
