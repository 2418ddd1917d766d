"""The kernel groups of the scheduler (``schedule.py``): one module per kind of kernel.

``base`` (the interface ``Group`` and the elementwise map kernel ``MapGroup``), ``reduce``, ``dot``,
``cumulative``, ``sort``, ``linalg``, ``scatter``, ``fft`` (Stockham and Bluestein), ``conv``, ``windows``,
``quantized``. A module that starts kernels exports ``GROUPS`` (primitive -> its ``Group`` subclass) and, where
its kernels read operands in place, ``OPERAND_VIEWS`` (primitive -> ``view(ctx, operand)``); ``schedule.py``
collects both from every module here, so a new group is one new module.
"""
