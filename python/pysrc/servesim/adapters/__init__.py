"""Adapters that let policy-search tools drive servesim: ``gepa`` (GEPA's adapter protocol)
and ``openevolve`` (OpenEvolve's evaluator). Each imports its tool only when used; the
candidates are policy programs (``servesim.search``)."""
