"""The position supervisor exactly as it was before its per-action cost was cut (issue
14 item 2: commit 84aee08), kept as the oracle that ``test_position_equivalence.py``
compares the live one against, bit for bit.

Only the modules the optimization touched are copied here (``position/supervisor.py``,
``position/envelope.py``, ``position/actions.py``, ``segment.py``, ``sweep.py``,
``chain_gravity.py``, and the closed-form clearances of ``chain.py``), their imports
pointed at each other; everything else (limits, kinematics, backups, verdicts) is the
live code, which both sides share. Do not edit these files: a change of behaviour
belongs in ``src/`` and in the tests that pin it, and then this copy is retired.
"""
