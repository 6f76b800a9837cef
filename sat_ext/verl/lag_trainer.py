"""Moved to :mod:`sat_ext.verl.lag.trainer`; this former path is that module."""

import sys

import sat_ext.verl.lag.trainer

sys.modules[__name__] = sat_ext.verl.lag.trainer
