"""The upstreamable patches, installed as ``sat_ext.patches``."""
