"""The colours and names of pager's prompt layers, shared by the viewer and the bench report.

Violets only, so a layer never reads as one of the bench report's strategies
(``pager.lab.replay.html`` takes them from here; the library never imports the lab).
"""

from __future__ import annotations

__all__ = ["EXTRA_LAYER_COLORS", "LAYER_COLORS", "LAYER_NAMES", "LAYER_ORDER"]

LAYER_COLORS = {"l1": "#3b0764", "l2": "#7c3aed", "l3": "#c084fc", "stubs": "#ddd6fe",
                "tools": "#a78bfa"}
LAYER_ORDER = ("l1", "l2", "l3", "stubs", "tools")
# for layers a scheduler reports beyond LAYER_ORDER, in turn
EXTRA_LAYER_COLORS = ("#581c87", "#9333ea", "#e9d5ff", "#6d28d9")
LAYER_NAMES = {"l1": "L1 pinned", "l2": "L2 history", "l3": "L3 recalled",
               "stubs": "stubs (behind handles)", "tools": "tool definitions"}
