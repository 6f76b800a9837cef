"""tests/preflight: the preflight's plan, inputs and bad-input errors (no training loop), and its live runs
(test_preflight_live.py)."""
