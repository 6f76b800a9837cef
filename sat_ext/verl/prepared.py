"""Moved to :mod:`sat_ext.verl.lag.prepared`; this former path is that module."""

import sys

import sat_ext.verl.lag.prepared

sys.modules[__name__] = sat_ext.verl.lag.prepared
