"""Test doubles shipped with refold: a scripted OpenAI-compatible server and in-memory fakes.

Import from here in your own tests; nothing in this package reaches the network.
"""

from refold.testing.llm_server import RunningLLM, ScriptedLLM, ScriptedReply, serve

__all__ = ["RunningLLM", "ScriptedLLM", "ScriptedReply", "serve"]
