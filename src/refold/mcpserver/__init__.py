"""MCP surface: refold's memory and session_search tools for any MCP client, over stdio."""

from refold.mcpserver.server import build_server, run_stdio

__all__ = ["build_server", "run_stdio"]
