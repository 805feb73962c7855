"""PPO with a learned critic (``algo.advantage=gae``): the value model, the critic component
that trains it, the advantage stage that asks it for values, and its checkpoint state."""
