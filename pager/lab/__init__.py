"""The lab: the tooling that measures and tunes pager, a layer of its own.

Nothing in the library imports it; it imports the library, as a user would
(``pager.open``, the formats, the core's counters). The ``pager`` command names
its commands by module string (``pager.cli.SUBCOMMANDS``) and imports them
only when it builds its parser. Modules:

- ``replay``: the replay benchmark: sessions replayed open-loop through full
  resend, the cheap baselines and pager; metrics, cost, the HTML report, the
  native (Anthropic / OpenAI Responses) replay;
- ``tune``: the option search behind ``pager tune`` (grids, Pareto frontier, choice);
- ``fit``: the offline fit of the ``fitted`` heat policy's weights (``python -m pager.lab.fit``);
- ``synth``: the deterministic synthetic sessions shipped in ``pager/data``
  (``python -m pager.lab.synth`` rewrites them);
- ``testing_pg``: a throwaway PostgreSQL server for tests and benchmarks;
- ``optiondocs``: the settings tables of ``docs/`` generated from ``pager.options``
  (``python -m pager.lab.optiondocs --write``);
- ``cli``: the ``replay``, ``bench`` and ``tune`` commands, and ``cli.common``,
  what they share (argument types, shared options, checks, the table).
"""
