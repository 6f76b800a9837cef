"""OpenRLHF's reward file for this example (``--reward.remote_url <this file>``): the examples' math verifier.

OpenRLHF loads this file in its vLLM actors and calls ``reward_func(queries, prompts, labels)``; the judgement
is ``sat_ext.examples.math_reward`` (math-verify with App. F's extraction, normalisation and SymPy equivalence,
a time limit per answer), the same as the verl examples' ``compute_score``. Needs ``pip install
'sat-ext[math]'`` on every node.
"""

from sat_ext.examples.math_reward import reward_func

__all__ = ["reward_func"]
