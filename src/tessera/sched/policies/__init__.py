"""Tessera's and the literature's policies, one module each (Gavel's own and its LP policies
live in :mod:`tessera.sched.gavel`).

Importing a policy module registers nothing: :mod:`tessera.sched.catalog` lists every policy.
"""
