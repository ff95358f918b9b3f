"""Figure parts the per-trial grids share (evidence.figures and the analysis's own figure modules draw with them)."""

from __future__ import annotations

import textwrap
from typing import Any

ABSENT_COLOR = "#a0201a"


def wrap_text(text: str, width: int) -> str:
    """`text` on lines of at most `width` characters, words kept whole."""
    return textwrap.fill(" ".join(text.split()), width, break_long_words=False, break_on_hyphens=False)


def absent_panel(ax: Any, why: str) -> None:
    """A grid panel with nothing to draw: why, centred in red, no ticks."""
    ax.text(
        0.5, 0.5, wrap_text(why, 34), transform=ax.transAxes, ha="center", va="center", fontsize=7, color=ABSENT_COLOR
    )
    ax.set_xticks([])
    ax.set_yticks([])
