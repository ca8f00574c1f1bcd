"""Arm readiness, by feature (``memory.preflight`` is the entry point and the command's engine).

- :mod:`memory.readiness.core`: a :class:`~memory.readiness.core.Check` built from per-item outcomes,
  a :class:`~memory.readiness.core.Task`, the calibration data and the text tests the checks share;
- :mod:`memory.readiness.sequential`: when a check's outcome is settled before its last item
  (curtailment and exact binomial bounds), and the simulation of its error rates;
- :mod:`memory.readiness.shared`: scorers more than one arm uses (operation labels, written facts);
- :mod:`memory.readiness.replies`: the probing questions and the reply-model checks every arm gets.

Each arm's own LLM tasks live in the arm's module (``BaseSystem.readiness_tasks``): adding an arm is
one module and one registry line, its readiness included.
"""
