"""``sat-ext preflight``: a user's config, or a shipped example, through verl's or OpenRLHF's own training loop on
the machine at hand, with only what the machine cannot run substituted (:mod:`sat_ext.preflight.cli`;
docs/preflight.md)."""
