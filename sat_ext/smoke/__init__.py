"""``sat-ext smoke``: the frameworks' own training loops, run for a few steps with SAT and the lag modes, and
checked (:mod:`sat_ext.smoke.cli`)."""
