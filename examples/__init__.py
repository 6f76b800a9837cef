"""The shipped examples, installed as ``sat_ext.examples`` (configs, launch scripts, the data script)."""
