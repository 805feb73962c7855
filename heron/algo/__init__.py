"""The RL algorithm's math as small pure tensor functions.

Each module holds one concept (advantages, policy loss, KL penalty, entropy,
masked reductions) with its formula in the docstring. Nothing here knows about
devices, distribution or models: inputs are tensors, outputs are tensors.
"""
