"""The four kinds of long-term memory (episodic, facts, procedural, messages, knowledge) on a MemoryStore."""
