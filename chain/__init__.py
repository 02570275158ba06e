"""The study chain: the assignment's sweeps run one after another, each starting from the winners
of the ones before it (``python -m chain``; the chains live in ``conf/chain/``).

Imports: `analysis` (the ranking that picks winners), `grpo.sweep` and below; the top layer.
"""
