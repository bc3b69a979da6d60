"""Adapters that put refold under other agent frameworks (each needs its framework installed):

- ``refold.integrations.openai_agents``: ``RefoldSession``, an openai-agents ``Session``
  (``pip install 'refold[agents]'``);
- ``refold.integrations.hermes``: a Hermes-Agent plugin registering refold as its context
  engine and a memory provider (``pip install 'refold[hermes]'``).

Nothing here is imported by the rest of refold.
"""
