"""Moved to :mod:`sat_ext.verl.lag.overrides`; this former path is that module."""

import sys

import sat_ext.verl.lag.overrides

sys.modules[__name__] = sat_ext.verl.lag.overrides
