"""Remediation policies (the autopilot): which recommendations a policy may apply on its own, and
the guards that hold it back (docs/autopilot.md). Pure: no Django, no clock -- the time of a
decision is the cycle's ``as_of``, handed in.

- :mod:`.policy`: a policy's terms (kind, condition, scope, budgets, quiet window, mode), their
  validation, and whether a recommendation matches one;
- :mod:`.guards`: one cycle's decisions -- apply, would apply (dry run) or held, with the guard
  that held it -- and the budget arithmetic;
- :mod:`.replay`: the same decisions over stored cycles, for the "replay last week" preview.
"""
