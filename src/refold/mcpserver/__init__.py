"""MCP surface: refold's memory and session_search tools for any MCP client, over stdio."""

from refold.mcpserver.server import TextResource, build_server, run_stdio

__all__ = ["TextResource", "build_server", "run_stdio"]
