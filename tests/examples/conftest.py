"""Start the slow subprocess checks of tests/examples as soon as collection ends, so they overlap the rest.

A test module opts in with ``start_background() -> Background`` and ``BACKGROUND_USERS`` (the names of the
tests that read its result); the subprocess starts only if one of those tests was collected, and the
module's fixture waits for it (or starts it itself when run without this hook).
"""

from __future__ import annotations


def pytest_collection_finish(session):
    started = set()
    for item in session.items:
        module = getattr(item, "module", None)
        if module is None or id(module) in started or not hasattr(module, "start_background"):
            continue
        if getattr(item, "originalname", item.name) in getattr(module, "BACKGROUND_USERS", ()):
            started.add(id(module))
            module._BACKGROUND_JOB = module.start_background()
