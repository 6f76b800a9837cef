"""Moved to :mod:`sat_ext.verl.lag.sampler`; ``pkg://sat_ext.verl.lag_sampler``, in existing configs, is that module."""

import sys

import sat_ext.verl.lag.sampler

sys.modules[__name__] = sat_ext.verl.lag.sampler
