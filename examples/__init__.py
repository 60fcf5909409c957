"""Examples of other LangGraph agents using agentic memory (not installed with the package)."""
