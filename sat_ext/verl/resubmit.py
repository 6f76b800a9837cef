"""Moved to :mod:`sat_ext.verl.lag.resubmit`; this former path is that module."""

import sys

import sat_ext.verl.lag.resubmit

sys.modules[__name__] = sat_ext.verl.lag.resubmit
