"""tether: serve RL policies to robots, guard every action, keep learning online.

Layers (lower never imports higher; ``runtime`` wires them):
``spec``/``config`` → ``sim`` → ``policy`` → ``safety`` → ``data`` → ``serving``
→ ``learning`` → ``runtime`` → ``cli``.
"""

__version__ = "0.1.0"
