"""The kernel groups of the scheduler (``schedule.py``): one module per kind of kernel.

``base`` (the interface and the elementwise map kernel), ``reduce``, ``dot``, ``cumulative``, ``sort``, ``linalg``,
``scatter``, ``fft`` (Stockham and Bluestein). ``schedule._GROUPS`` maps each primitive that starts a group
to its class.
"""
