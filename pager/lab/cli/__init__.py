"""The lab's commands: ``pager replay``, ``pager bench``, ``pager tune`` (``pager.cli`` registers them)."""
