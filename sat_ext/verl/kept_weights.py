"""Moved to :mod:`sat_ext.verl.lag.kept_weights`; this former path is that module."""

import sys

import sat_ext.verl.lag.kept_weights

sys.modules[__name__] = sat_ext.verl.lag.kept_weights
