"""Test doubles shipped with refold: a scripted OpenAI-compatible server and in-memory fakes.

Import from here in your own tests; nothing in this package reaches the network.
"""

from refold.testing.anthropic_server import AnthropicReply, RunningAnthropic, serve_anthropic
from refold.testing.llm_server import RunningLLM, ScriptedLLM, ScriptedReply, serve
from refold.testing.truth import assert_sent_as_client_sent

__all__ = ["AnthropicReply", "RunningAnthropic", "RunningLLM", "ScriptedLLM", "ScriptedReply",
           "assert_sent_as_client_sent", "serve", "serve_anthropic"]
