"""sat_ext: Staleness-Adaptive Trust Region (SAT) losses and lag-bounded async rollout for verl and OpenRLHF.

The math lives in :mod:`sat_ext.core` (torch only). Framework adapters live in :mod:`sat_ext.verl` and
:mod:`sat_ext.openrlhf`; the lag controller in :mod:`sat_ext.lag`.
"""

__version__ = "0.2.0"
